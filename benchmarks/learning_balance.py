"""SFT rows balanced by step depth, for ``benchmarks/learning.py --balance``.

An SFT row is one step, and each step decides whether to search again or to answer. On a mix of
rungs that decision has a majority at each depth: the teacher's 590 rows of the four-rung mix
answer on 51 of the 200 steps after one search and on 108 of the 149 after two
(docs/world.md). A model trained on them learned the majority at each depth, not to count the
hops its question asks for. Here the fewer kind at each depth is written again until it is about
as many as the other, so the stop cannot be told from the depth: the question and the steps so
far must say it. What cannot balance a depth where every step searches (the first) or every
step answers (the last) is left as it is.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def copies(steps: list[tuple[int, bool]]) -> list[int]:
    """How many times each step, given as (its depth, whether it answers), is written: at a depth
    where some steps answer and some search, each step of the fewer kind round(more / fewer)
    times; every other step once."""
    counts = Counter(steps)
    return [max(1, round(counts[(depth, not answers)] / counts[(depth, answers)])) for depth, answers in steps]


def balanced_rows(root: Path, run_id: str) -> Path:
    """The run's SFT export balanced by depth (``copies``), written as ``ROOT/balanced.parquet``: a
    row's depth is its path's length, and it answers when its last node is an answer."""
    import pyarrow.parquet as pq

    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    sql = """select s.*, len(s.node_ids) as depth, n.kind = 'answer' as answers
             from sft_examples s join nodes n on n.node_id = s.node_ids[-1] and n.run_id = s.run_id
             where s.run_id = $r order by s.question_id, depth"""
    table = query(Warehouse(root / "wh"), sql, {"r": run_id})
    steps = list(zip(table.column("depth").to_pylist(), table.column("answers").to_pylist(), strict=True))
    times = copies(steps)
    table = table.drop_columns(["depth", "answers"]).take([i for i, n in enumerate(times) for _ in range(n)])
    per_depth = Counter((depth, answers) for (depth, answers), n in zip(steps, times, strict=True) for _ in range(n))
    print("balanced rows (depth, answers): " + ", ".join(f"{k}: {v}" for k, v in sorted(per_depth.items())))
    path = root / "balanced.parquet"
    pq.write_table(table, path)
    return path
