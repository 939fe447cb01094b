"""benchmarks/learning.py's --balance, worked by hand: the SFT rows of a mix of rungs written again
at each depth until answering and searching steps are about as many. No model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pyarrow.parquet as pq

from ragfactory.warehouse.store import Warehouse

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "learning_balance.py"
_spec = importlib.util.spec_from_file_location("learning_balance", SCRIPT)
learning_balance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(learning_balance)


def test_the_four_rung_mix_answers_as_often_as_it_searches_at_each_depth():
    """The teacher's 590 rows of the mix (docs/world.md): 200 first queries; after one search 51
    answers (lookups) and 149 queries; after two 108 answers and 41 queries (chains); 41 answers
    after three. The 51 are written round(149 / 51) = 3 times (153), the 41 queries after two
    searches round(108 / 41) = 3 times (123); the first and last depths have one kind and stay."""
    steps = [(1, False)] * 200 + [(2, True)] * 51 + [(2, False)] * 149
    steps += [(3, True)] * 108 + [(3, False)] * 41 + [(4, True)] * 41
    times = learning_balance.copies(steps)
    assert times == [1] * 200 + [3] * 51 + [1] * 149 + [1] * 108 + [3] * 41 + [1] * 41
    assert sum(times) == 774


def test_balanced_rows_reads_a_steps_depth_and_kind_from_the_run(tmp_path):
    """A lookup (a query, then an answer) and two bridges (two queries, then an answer). After one
    search one step answers and two search: the lookup's answer is written round(2 / 1) = 2
    times. The first depth only searches and the last only answers. Another run's rows are not
    read."""
    wh = Warehouse(tmp_path / "wh")
    paths = {"look": ["look-q", "look-a"], "br1": ["br1-q", "br1-q2", "br1-a"], "br2": ["br2-q", "br2-q2", "br2-a"]}
    nodes = [
        {
            "node_id": n,
            "run_id": "r",
            "question_id": q,
            "strategy": "r3",
            "kind": "answer" if n.endswith("-a") else "sub_query",
        }
        for q, path in paths.items()
        for n in path
    ]
    wh.write("nodes", nodes, "s0")
    rows = [
        {"example_id": f"{q}{i}", "run_id": "r", "question_id": q, "strategy": "r3", "node_ids": path[: i + 1],
         "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": path[i]}]}
        for q, path in paths.items()
        for i in range(len(path))
    ]  # fmt: skip
    wh.write("sft_examples", rows, "s0")
    wh.write("sft_examples", [{**rows[0], "example_id": "other", "run_id": "r2"}], "s1")
    written = pq.read_table(learning_balance.balanced_rows(tmp_path, "r")).column("example_id").to_pylist()
    assert written == ["br10", "br11", "br12", "br20", "br21", "br22", "look0", "look1", "look1"]
