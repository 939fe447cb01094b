"""The build flow with R3-RAG: attempts, best-of-N, rewards rows, the view and Algorithm 2's SFT.

The engine is the only double (policy and judge); the flow, tasks, batcher, cache, BM25 index and
warehouse are real. Per question, 2 attempts: attempt 0 searches the question, the relevance
judge gives its documents 0.5, and it answers the gold answer (correct, 2 steps, λ_T 0.6);
attempt 1 answers "Bob" at once and the outcome judge says no (incorrect, 1 step, λ_T −0.2).
Attempt 0 is kept: total scaled process reward 0.5 · 0.6 + 0 = 0.3; attempt 1's 0 · −0.2 = 0.
Algorithm 2 gives 2 SFT examples per question.
"""

from __future__ import annotations

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import r3_policy


@pytest.fixture
def scripted(engines):
    backend = ScriptedBackend(r3_policy)
    engines(backend)
    return backend


def test_r3_builds_attempts_rewards_and_sft(tmp_path, scripted):
    config = BuildConfig.model_validate(
        {
            "name": "r3-test",
            "warehouse": {"root": str(tmp_path / "wh")},
            "datasets": [{"name": "hotpotqa", "limit": 2}],
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(),
            "search": {"strategies": ["r3"], "r3": {"n_attempts": 2}},
        }
    )
    summary = build(config)
    assert summary["status"] == "completed", summary
    wh = Warehouse(config.warehouse.root)
    rows = query(
        wh,
        "select attempt, outcome, scale, kept, reason, n_steps, outcome_reward, "
        "round(total_scaled_process, 6) as total, len(steps) as listed "
        "from r3_trajectories order by question_id, attempt",
    ).to_pylist()
    assert (
        rows
        == [
            {
                "attempt": 0,
                "outcome": "correct",
                "scale": 0.6,
                "kept": True,
                "reason": "kept",
                "n_steps": 2,
                "outcome_reward": 1.0,
                "total": 0.3,
                "listed": 2,
            },
            {
                "attempt": 1,
                "outcome": "incorrect",
                "scale": -0.2,
                "kept": False,
                "reason": "incorrect",
                "n_steps": 1,
                "outcome_reward": 0.0,
                "total": 0.0,
                "listed": 1,
            },
        ]
        * 2
    )
    names = query(wh, "select name, count(*) as n from rewards group by 1 order by 1").to_pylist()
    # per question: relevance on the one query; format and process on all 3 steps; 2 outcomes
    assert names == [
        {"name": "format", "n": 6},
        {"name": "outcome", "n": 4},
        {"name": "process", "n": 6},
        {"name": "relevance", "n": 2},
    ]
    sft = query(wh, "select messages from sft_examples order by example_id").to_pylist()
    assert len(sft) == 4 and all(r["messages"][-1]["role"] == "assistant" for r in sft)
    assert sum("The Previous Steps:Step 1:" in r["messages"][0]["content"] for r in sft) == 2
    calls = scripted.calls
    assert build(config)["status"] == "completed"
    assert scripted.calls == calls, "the rebuild called the engine"
