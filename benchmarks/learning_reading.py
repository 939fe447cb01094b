"""What a model reads in ``benchmarks/learning.py``, apart from what it learned of searching:
each model against the base when the base is handed the passages (the report ``learning_reading``).

In a method's own mode the base hardly searches (0.04 retrievals a question on the world's
lookups), so any model that learned to search is ahead of it by whatever it then reads from the
passage it found, even a control whose labels are wrong. The ``rag`` mode hands the base the top
passages for the question itself (one retrieval, what a lookup needs; ``tasks/eval/baselines.py``)
and asks for the answer. The base answers in a sentence ("Nisthinvale is located in
Mosbaexland"), not with the name alone, so its exact match is 0 whatever it read; cover-EM (the
gold answer anywhere in the reply, ``cover_exact_match`` in ``tasks/rewards/answer.py``) counts
what it read. Each model's cover-EM in its own mode against the base's in ``rag``, paired
question by question with the bootstrap 95 % interval, is what the model reads beyond a base
that is made to search once.
"""

from __future__ import annotations

from pathlib import Path

RAG_BASE = "embedded"  # the base, handed the passages


def covers(root: Path, model: str, mode: str) -> dict[str, float]:
    """Question id -> cover-EM of ``model``'s answers in ``mode`` (its latest evaluation)."""
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    sql = """select question_id, arg_max(cover_em, created_at) as cover from evals
             where model_id = $m and mode = $mode group by question_id"""
    rows = query(Warehouse(root / "wh"), sql, {"m": model, "mode": mode}).to_pylist()
    return {row["question_id"]: row["cover"] for row in rows}


def paired_scores(a: dict[str, float], b: dict[str, float], names: str) -> dict:
    """Two models' scores (question id -> score) on the questions both have: their number, the two
    means, the delta and its paired bootstrap 95 % interval (``tasks/eval/compare.py``); ``names``
    says whose scores they are when they share no question."""
    from ragfactory.tasks.eval.compare import paired_interval

    ids = sorted(set(a) & set(b))
    if not ids:
        raise ValueError(f"{names} share no question")
    a_scores, b_scores = [a[q] for q in ids], [b[q] for q in ids]
    low, high = paired_interval(a_scores, b_scores)
    n = len(ids)
    return {"n": n, "a": sum(a_scores) / n, "b": sum(b_scores) / n,
            "delta": (sum(a_scores) - sum(b_scores)) / n, "low": low, "high": high}  # fmt: skip


def reading_rows(models: dict[str, dict[str, float]], base: dict[str, float]) -> list[dict]:
    """One line a model: its cover-EM against the base's handed the passages, on the questions
    both answered, with the paired bootstrap interval of the delta."""
    rows = []
    for label, scores in models.items():
        pair = paired_scores(scores, base, f"learning_reading: {label} and the base in rag mode")
        rows.append({"model": label, "n": pair["n"], "cover_em": pair["a"], "base_handed_passages": pair["b"],
                     "delta": pair["delta"], "low": pair["low"], "high": pair["high"]})  # fmt: skip
    return rows
