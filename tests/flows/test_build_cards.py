"""Dataset cards in every export folder of a small DecEx build (tasks/export/cards.py): the Hub's
``DatasetCard`` parses each, and ``datasets.load_dataset(folder)`` still reads the rows. The run
is recorded only once its cards are written: a build whose report step fails records ``failed``."""

from __future__ import annotations

import datasets
import pytest
from huggingface_hub import DatasetCard

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import decex_policy

GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=2).questions}


def _config(root) -> BuildConfig:
    return BuildConfig.model_validate(
        {
            "name": "cards-test",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "hotpotqa", "limit": 2}],
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(max_in_flight=2),
            "search": {
                "strategies": ["decex"],
                "shard_size": 2,
                "decex": {"k": 2, "n_rollouts": 1, "t_max": 2, "termination_samples": 1},
            },
        }
    )


def test_every_export_folder_has_a_card_the_hub_parses_and_datasets_loads(tmp_path, engines):
    engines(ScriptedBackend(decex_policy(GOLD)))
    config = _config(tmp_path / "wh")
    summary = build(config)
    assert summary["status"] == "completed", summary
    wh, run = Warehouse(tmp_path / "wh"), summary["run_id"]
    cards = sorted(p.relative_to(wh.root).as_posix() for p in wh.root.rglob("README.md"))
    assert cards == [
        f"artifacts/llamafactory/{run}/README.md",
        f"preference_pairs/run_id={run}/README.md",
        f"sft_examples/run_id={run}/README.md",
    ]
    export = summary["exports"][0]
    for relative, rows in zip(
        cards, (export["sft_examples"] + export["preference_pairs"], export["preference_pairs"], export["sft_examples"])
    ):
        folder = wh.root / relative.removesuffix("/README.md")
        card = DatasetCard.load(folder / "README.md")
        assert card.data.license == "cc-by-sa-4.0" and card.data.size_categories == ["n<1K"]
        assert "question-answering" in card.data.task_categories
        assert f"config hash `{config.config_hash()}`" in card.text and "## Cost (the `run_cost` view)" in card.text
        assert "| decex | 2 |" in card.text  # yield: decex expanded 2 questions
        loaded = datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "hf"))
        if relative.startswith("artifacts/"):  # the first file is the default config: decex_dpo
            rows = export["preference_pairs"]
        assert loaded.num_rows == rows, relative
        # one cache for every folder, as a user's: each folder reads its own table, not a cached neighbour's
        assert (
            "chosen" if "preference_pairs" in relative or relative.startswith("artifacts/") else "messages"
        ) in loaded.column_names, (relative, loaded.column_names)
        if relative.startswith("sft_examples/"):
            assert "## Label sources" in card.text and "kept reasoning chains" in card.text


def test_a_build_whose_cards_cannot_be_written_is_recorded_failed_not_completed(tmp_path, engines):
    engines(ScriptedBackend(decex_policy(GOLD)))
    wh = Warehouse(tmp_path / "wh")
    blocked = wh.root / "sft_examples" / "run_id=cards" / "README.md"
    blocked.mkdir(parents=True)  # a folder where the sft_examples card goes: the report step fails
    with pytest.raises(IsADirectoryError):
        build(_config(wh.root), run_id="cards")
    [run] = wh.read("runs").to_pylist()
    assert run["status"] == "failed" and run["error"].startswith("IsADirectoryError: "), run
    assert run["finished_at"] is not None
    assert wh.read("sft_examples").num_rows > 0 and blocked.is_dir()
