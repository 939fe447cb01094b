"""Model lookup by lineage (``latest:<name>``) and id, and the GRPO task filter on exports."""

from __future__ import annotations

import pytest

from ragfactory.tasks.training.data import export_files, read_export
from ragfactory.tasks.training.registry import latest_model, resolve_model_ref
from ragfactory.warehouse.store import Warehouse
from tests.training.exports import register_trained, write_exports


def test_latest_is_the_newest_model_of_the_lineage_whose_weights_exist(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    register_trained(wh, tmp_path, "sft-a", "nightly", 1)
    register_trained(wh, tmp_path, "sft-b", "nightly", 2)
    register_trained(wh, tmp_path, "sft-c", "nightly", 3, keep=False)  # weights deleted
    register_trained(wh, tmp_path, "sft-d", "other", 4)
    assert latest_model(wh, "nightly")["model_id"] == "sft-b"
    ref = resolve_model_ref(wh, "latest:nightly")
    assert (ref.load, ref.registered_id) == (str(tmp_path / "sft-b"), "sft-b")
    ref = resolve_model_ref(wh, "sft-d")
    assert (ref.load, ref.registered_id) == (str(tmp_path / "sft-d"), "sft-d")
    ref = resolve_model_ref(wh, "embedded")
    assert (ref.load, ref.registered_id) == ("embedded", None)
    with pytest.raises(FileNotFoundError, match="'sft-c' is registered but its weights are not on disk"):
        resolve_model_ref(wh, "sft-c")
    with pytest.raises(LookupError, match="lineage 'missing'"):
        resolve_model_ref(wh, "latest:missing")


def test_grpo_task_filter_keeps_one_kind_of_prompt(tmp_path):
    wh = Warehouse(tmp_path)
    write_exports(wh)
    files = export_files(wh.root, "grpo_prompts", "run-1", None)
    assert len(read_export(files, "grpo", "qa")) == 4
    with pytest.raises(ValueError, match="no rows of task 'plan'"):
        read_export(files, "grpo", "plan")


def test_export_files_are_the_runs_partition_sorted(tmp_path):
    wh = Warehouse(tmp_path)
    write_exports(wh, "run-1")
    write_exports(wh, "run-2")
    wh.write("sft_examples", [{"example_id": "x", "run_id": "run-1", "messages": []}], "apex")
    folder = wh.root / "sft_examples" / "run_id=run-1"
    assert export_files(wh.root, "sft_examples", "run-1", None) == [folder / "apex.parquet", folder / "decex.parquet"]
    with pytest.raises(FileNotFoundError, match="no parquet files in sft_examples of run 'run-3' under "):
        export_files(wh.root, "sft_examples", "run-3", None)
    with pytest.raises(KeyError, match="unknown table 'sft'"):
        export_files(wh.root, "sft", "run-1", None)
