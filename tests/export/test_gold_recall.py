"""The ``export.require_gold_recall`` filter (tasks/export/gold_recall.py) on the two HotpotQA
questions whose searches tests/warehouse/test_labels.py works out by hand."""

from __future__ import annotations

from ragfactory.tasks.export.gold_recall import GOLD_RECALL_SQL, keep_gold_recall
from ragfactory.tasks.export.skips import recording, skip_rows
from ragfactory.warehouse.catalog import query
from tests.warehouse.labelled import BLACK_BOOK, TOKAREV, hotpotqa_warehouse


def _row(question: str, *paths: str) -> dict:
    return {
        "example_id": f"{question}{paths[-1]}",
        "run_id": "r1",
        "question_id": question,
        "strategy": "treeps",
        "node_ids": [f"{question}|{p}" for p in paths],
    }


def test_chains_below_the_gold_recall_are_skipped_with_their_figures(tmp_path):
    wh = hotpotqa_warehouse(tmp_path)
    found = {r["node_id"]: r for r in query(wh, GOLD_RECALL_SQL, {"run_id": "r1", "strategy": "treeps"}).to_pylist()}
    rows = [
        _row(TOKAREV, "q", "q/s0", "q/s0/s1", "q/s0/s1/s2", "q/s0/s1/s2/a"),  # found 2 of 2
        _row(BLACK_BOOK, "q", "q/s0", "q/s0/a"),  # found 0 of 2
        _row(BLACK_BOOK, "q", "q/s1", "q/s1/s2", "q/s1/s2/a"),  # found 2 of 2
        _row("bamboogle:1", "q", "q/a"),  # no gold paragraphs
    ]
    with recording() as skips:
        kept = keep_gold_recall(rows, found, 0.5)
    assert [r["example_id"] for r in kept] == [f"{TOKAREV}q/s0/s1/s2/a", f"{BLACK_BOOK}q/s1/s2/a"]
    assert [(r["question_id"], r["exporter"], r["reason"]) for r in skip_rows(skips)] == [
        ("bamboogle:1", "sft_examples", "require_gold_recall: the question has no gold supporting paragraphs"),
        (BLACK_BOOK, "sft_examples", "require_gold_recall: searches found 0 of 2 gold paragraphs (recall 0.00 < 0.5)"),
    ]
    with recording() as skips:  # the same chains at recall 0: only the question without gold goes
        assert len(keep_gold_recall(rows, found, 0.0)) == 3


def _chains(inputs, config, run_seed) -> list[dict]:
    """A toy SFT exporter: one row per leaf, through every node on its path."""
    nodes = inputs["nodes"]
    rows = []
    for leaf in (n for n in nodes if n["is_leaf"]):
        path = [
            n["node_id"]
            for n in nodes
            if n["question_id"] == leaf["question_id"]
            and (leaf["path"] == n["path"] or leaf["path"].startswith(n["path"] + "/"))
        ]
        rows.append(
            {
                "example_id": leaf["node_id"],
                "run_id": "r1",
                "question_id": leaf["question_id"],
                "strategy": "treeps",
                "messages": [{"role": "user", "content": "q"}],
                "node_ids": path,
            }
        )
    return rows


def test_the_export_task_keeps_the_chains_that_found_the_gold(tmp_path):
    from prefect.logging import disable_run_logger

    from ragfactory.tasks.export.config import ExportConfig
    from ragfactory.tasks.export.registry import EXPORTS, Exporter, StrategyExports
    from ragfactory.tasks.training_data import write_training_data

    wh = hotpotqa_warehouse(tmp_path)
    exporter = Exporter("sft_examples", {"nodes": ("node_id", "question_id", "path", "is_leaf")}, _chains)
    config = ExportConfig(require_gold_recall=1.0, decontamination={"mode": "off"})
    with EXPORTS.registered(StrategyExports("treeps", (exporter,))), disable_run_logger():
        counts = write_training_data.fn(str(wh.root), "r1", "treeps", config)
    # of the three leaves, Tokarev's chain and Black Book's second found 2 of 2; the first 0 of 2
    assert counts["sft_examples"] == 2
    kept = query(wh, "select example_id from sft_examples").to_pylist()
    assert sorted(r["example_id"] for r in kept) == [f"{BLACK_BOOK}|q/s1/s2/a", f"{TOKAREV}|q/s0/s1/s2/a"]
    skips = query(wh, "select question_id, exporter, reason from export_skips").to_pylist()
    assert skips == [
        {
            "question_id": BLACK_BOOK,
            "exporter": "sft_examples",
            "reason": "require_gold_recall: searches found 0 of 2 gold paragraphs (recall 0.00 < 1)",
        }
    ]
