"""The build flow with APEX: plan, SEPR-score against MuSiQue gold plans, execute, export.

The engine is a scripted double; SEPR uses the real MiniLM embedder, and the flow, tasks,
batcher, cache, BM25 index and warehouse are real.
"""

from __future__ import annotations

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import apex_policy


@pytest.fixture
def scripted(engines):
    backend = ScriptedBackend(apex_policy)
    engines(backend)
    return backend


def test_apex_plans_are_scored_executed_and_joined(tmp_path, scripted):
    root = tmp_path / "wh"
    config = BuildConfig.model_validate(
        {
            "name": "apex-test",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "musique", "limit": 2}],
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},  # both questions expanded
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(),
            "search": {"strategies": ["apex"], "apex": {"n_plans": 2, "max_hops": 1}},
        }
    )
    summary = build(config)
    assert summary["status"] == "completed", summary
    wh = Warehouse(root)
    sources = query(wh, "select source, count(*) as n from plans group by 1 order by 1").to_pylist()
    assert sources == [{"source": "gold", "n": 2}, {"source": "planner", "n": 4}]
    scores = query(wh, "select precision, recall, f1, tau from plan_scores").to_pylist()
    assert len(scores) == 4
    assert all(0.0 <= s["f1"] <= 1.0 and s["tau"] == pytest.approx(0.7) for s in scores)
    joined = query(wh, "select count(*) as n from apex_plans").to_pylist()[0]["n"]
    assert joined == 6
    nodes = query(wh, "select count(distinct question_id) as q from nodes where strategy = 'apex'").to_pylist()
    assert nodes == [{"q": 2}]
    export = next(e for e in summary["exports"] if e["strategy"] == "apex")
    assert export["grpo_prompts"] == 2
