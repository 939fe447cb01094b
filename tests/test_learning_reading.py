"""benchmarks/learning.py's --reading, worked by hand: each model's cover-EM against the base's
handed the passages, paired question by question. No model."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ragfactory.warehouse.store import Warehouse

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "learning_reading.py"
_spec = importlib.util.spec_from_file_location("learning_reading", SCRIPT)
learning_reading = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(learning_reading)


def test_a_control_that_reads_fewer_answers_than_the_base_handed_the_passages_falls_below_zero():
    """R3's pruned control on the 200 test lookups (docs/world.md) reads 5 answers, and the base
    in the rag mode has the answer in its reply on 20 other questions: (5 - 20) / 200 = -0.075,
    and the interval is below zero. A model right on all 200 against a base right on none differs
    by 1 on every pair, so its interval is that one point."""
    ids = [f"q{i:03d}" for i in range(200)]
    control = {q: float(i < 5) for i, q in enumerate(ids)}
    base = {q: float(5 <= i < 25) for i, q in enumerate(ids)}
    [row] = learning_reading.reading_rows({"control": control}, base)
    assert (row["model"], row["n"], row["cover_em"], row["base_handed_passages"]) == ("control", 200, 0.025, 0.1)
    assert row["delta"] == pytest.approx(-0.075)
    assert row["low"] < row["delta"] < row["high"] < 0
    [whole] = learning_reading.reading_rows({"kept": dict.fromkeys(ids, 1.0)}, dict.fromkeys(ids, 0.0))
    assert (whole["delta"], whole["low"], whole["high"]) == (1.0, 1.0, 1.0)


def test_only_the_questions_both_answered_pair_and_none_is_an_error():
    """q1 and q2 are both answered: (1 + 0) - (0 + 0) over 2 = 0.5; q3 has no base answer."""
    [row] = learning_reading.reading_rows({"m": {"q1": 1.0, "q2": 0.0, "q3": 1.0}}, {"q1": 0.0, "q2": 0.0})
    assert (row["n"], row["delta"]) == (2, 0.5)
    with pytest.raises(ValueError, match="m and the base in rag mode share no question"):
        learning_reading.reading_rows({"m": {"q1": 1.0}}, {"q2": 0.0})


def test_covers_reads_a_models_latest_answer_in_one_mode(tmp_path):
    """q1 was evaluated twice in r3 (cover 0, then 1): the later counts. The same model's rag rows
    and another model's r3 rows are not read."""
    wh = Warehouse(tmp_path / "wh")

    def row(model, mode, q, cover, minute):
        at = datetime(2026, 11, 30, 12, minute, tzinfo=UTC)
        return {"eval_id": f"{model}-{mode}-{q}-{minute}", "run_id": "eval-1", "model_id": model, "mode": mode,
                "question_id": q, "cover_em": cover, "created_at": at}  # fmt: skip

    rows = [row("m", "r3", "q1", 0.0, 1), row("m", "r3", "q1", 1.0, 2), row("m", "r3", "q2", 0.0, 1)]
    rows += [row("m", "rag", "q3", 1.0, 1), row("other", "r3", "q2", 1.0, 1)]
    wh.write("evals", rows, "s0")
    assert learning_reading.covers(tmp_path, "m", "r3") == {"q1": 1.0, "q2": 0.0}
    assert learning_reading.covers(tmp_path, "m", "rag") == {"q3": 1.0}
