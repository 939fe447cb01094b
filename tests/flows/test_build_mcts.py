"""The build flow with ReasonRAG MCTS: trees with N and Q, step pairs and SFT, from a scripted policy.

The engine is the only double; the flow, tasks, batcher, cache, BM25 index and warehouse are real.
Per question (4 iterations, child_limit 2, max_depth 3, α 0.95): a query (its rollout answers
correctly at depth 3: 0.95³ = 0.857375), a wrong answer "Bob" (0), then two evidence steps under
the query, each with a correct rollout (0.857375). The root state gives one pair, query over
"Bob"; the two evidence steps share their text, so no pair under the query.
"""

from __future__ import annotations

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import mcts_policy


@pytest.fixture
def scripted(engines):
    backend = ScriptedBackend(mcts_policy)
    engines(backend)
    return backend


def test_mcts_builds_trees_pairs_and_sft(tmp_path, scripted):
    config = BuildConfig.model_validate(
        {
            "name": "mcts-test",
            "warehouse": {"root": str(tmp_path / "wh")},
            "datasets": [{"name": "hotpotqa", "limit": 2}],
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(),
            "search": {
                "strategies": ["mcts"],
                "mcts": {"iterations": 4, "child_limit": 2, "max_depth": 3, "alpha": 0.95},
            },
        }
    )
    summary = build(config)
    assert summary["status"] == "completed", summary
    assert summary["valuations"] == []  # the search values its own trees
    wh = Warehouse(config.warehouse.root)
    per_question = query(
        wh, "select question_id, count(*) as n, max(visits) as root_n from nodes group by 1 order by 1"
    ).to_pylist()
    assert [(r["n"], r["root_n"]) for r in per_question] == [(5, 4), (5, 4)]  # root + 4 steps; N(root) 4
    pairs = query(wh, "select decision, round(gap, 6) as gap from preference_pairs").to_pylist()
    assert pairs == [{"decision": "query", "gap": 0.857375}] * 2
    # SFT: the query, its first evidence, no answer node under it yet -> none; only answers count
    assert query(wh, "select count(*) as n from sft_examples").to_pylist() == [{"n": 0}]
    layers = query(
        wh,
        "select depth, n_steps, n_kept, n_answers, visits, round(max_value, 6) as q, n_pairs, "
        "pairs[1].stage as stage, pairs[1].chosen as chosen, pairs[1].rejected as rejected "
        "from mcts_tree order by question_id, depth",
    ).to_pylist()
    # depth 1: the query (N 3) and "Bob" (N 1), the pair query over Bob; depth 2: two evidence steps
    depth_1 = {
        "depth": 1,
        "n_steps": 2,
        "n_kept": 2,
        "n_answers": 1,
        "visits": 4,
        "q": 0.857375,
        "n_pairs": 1,
        "stage": "query",
        "chosen": "q/s0",
        "rejected": "q/s1",
    }
    depth_2 = {
        "depth": 2,
        "n_steps": 2,
        "n_kept": 2,
        "n_answers": 0,
        "visits": 2,
        "q": 0.857375,
        "n_pairs": 0,
        "stage": None,
        "chosen": None,
        "rejected": None,
    }
    assert layers == [depth_1, depth_2] * 2
    calls = scripted.calls
    assert build(config)["status"] == "completed"
    assert scripted.calls == calls, "the rebuild called the engine"
