"""What a model spec (``--model``, ``--base-model``, ``--policy-model``) names: the embedded model, a registered model, a folder, or a served name."""

from __future__ import annotations

import pytest

from ragfactory.tasks.training.registry import model_row, register_model, resolve_model_ref


def _register(warehouse, model_id, path):
    row = model_row(model_id, {"run_id": "build-1"}, "embedded", "sft", "snap", {}, {}, str(path))
    register_model(warehouse, row)


@pytest.mark.parametrize("spec", ["embedded", "smollm2", " embedded "])
def test_embedded(warehouse, spec):
    model = resolve_model_ref(warehouse, spec)
    assert (model.model_id, model.load, model.source) == ("embedded", "embedded", "embedded")


def test_a_registered_model_is_named_by_its_id_and_loaded_from_its_path(warehouse, tmp_path):
    weights = tmp_path / "weights"
    weights.mkdir()
    _register(warehouse, "sft-abc", weights)
    for spec in ("sft-abc", "latest:sft"):  # by id, or as the newest of its lineage
        model = resolve_model_ref(warehouse, spec)
        assert (model.model_id, model.load, model.source) == ("sft-abc", str(weights), "registry")


def test_a_registered_model_without_weights_is_an_error(warehouse, tmp_path):
    _register(warehouse, "sft-gone", tmp_path / "deleted")
    with pytest.raises(FileNotFoundError, match="sft-gone"):
        resolve_model_ref(warehouse, "sft-gone")


def test_a_folder_is_named_by_its_absolute_path(warehouse, tmp_path, monkeypatch):
    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)
    model = resolve_model_ref(warehouse, "ckpt")
    assert model.model_id == model.load == str((tmp_path / "ckpt").resolve())
    assert model.source == "path"


def test_anything_else_is_a_model_name_for_the_backend(warehouse):
    model = resolve_model_ref(warehouse, "Qwen/Qwen2.5-7B-Instruct")
    assert (model.model_id, model.load, model.source) == ("Qwen/Qwen2.5-7B-Instruct",) * 2 + ("name",)


def test_no_model_is_an_error(warehouse):
    with pytest.raises(ValueError, match="no model"):
        resolve_model_ref(warehouse, "  ")


def _decided(warehouse, night, candidate, decision, incumbent="embedded", minute=0):
    import datetime as dt

    from ragfactory.tasks.eval.promotion import Decision, PromotionConfig, promotion_row

    at = dt.datetime(2026, 1, 1, 2, minute, tzinfo=dt.UTC)
    row = promotion_row("nightly", night, candidate, incumbent, PromotionConfig(), Decision(decision, "why"), at)
    warehouse.write("promotions", [row], night)


def test_promoted_names_the_model_the_newest_decision_left_in_place(warehouse, tmp_path):
    from ragfactory.tasks.preflight import model_problem

    with pytest.raises(LookupError, match="no model promoted"):
        resolve_model_ref(warehouse, "promoted")
    assert "no model promoted" in model_problem("llm.policy.model", "promoted", warehouse)
    weights = tmp_path / "weights"
    weights.mkdir()
    _register(warehouse, "dpo-win", weights)
    _decided(warehouse, "2026-01-01", "dpo-lose", "keep")  # the incumbent stays: embedded
    assert resolve_model_ref(warehouse, "promoted").model_id == "embedded"
    _decided(warehouse, "2026-01-02", "dpo-win", "promote", minute=1)
    model = resolve_model_ref(warehouse, "promoted")
    assert (model.spec, model.model_id, model.load, model.source) == ("promoted", "dpo-win", str(weights), "registry")
    assert model_problem("llm.policy.model", "promoted", warehouse) is None
