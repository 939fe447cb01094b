"""A build on the null engine (``backend: null``): the five strategies at the demo's parameters,
through the real flow, tasks, batcher, call cache, BM25 index, valuation, exports and warehouse,
end with every node parsed (no format error) and every stage's tables written."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.warehouse.store import Warehouse

STRATEGIES = ["decex", "treeps", "mcts", "r3", "apex"]
DEMO_SIZES = {  # configs/demo.yaml's tree sizes
    "decex": {"k": 2, "n_rollouts": 2, "t_max": 1, "min_iterations": 1, "termination_samples": 3},
    "treeps": {"n": 4, "depth": 2, "temperature": 0.7},
    "mcts": {"iterations": 6, "max_depth": 4, "min_queries": 1, "temperature": 0.7},
    "r3": {"n_attempts": 3, "max_iterations": 2, "min_queries": 1, "answer_at_limit": True},
    "apex": {"n_plans": 2, "max_steps": 2, "max_hops": 1, "execute_gold": False},
}


def null_config(root, questions: int = 1, limit: int | None = 20) -> dict:
    """The demo's tree sizes on the null engine, ``questions`` from each of HotpotQA and MuSiQue
    (the first ``limit`` rows of each file, all in train)."""
    return {
        "name": f"null-{questions}",
        "warehouse": {"root": str(root)},
        "datasets": [{"name": "hotpotqa", "limit": limit}, {"name": "musique", "limit": limit}],
        "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
        "retrieval": {"dense": {"enabled": False}},
        "llm": {"policy": {"backend": "null", "model": "embedded"}},
        "search": {"strategies": STRATEGIES, "questions_per_dataset": questions, **DEMO_SIZES},
    }


@pytest.mark.slow  # ~45 s on 2 shared cores: the tokenizer, APEX's SEPR embedder and Prefect load
def test_a_null_engine_build_runs_every_stage_without_a_format_error(tmp_path):
    config = BuildConfig.model_validate(null_config(tmp_path / "wh"))
    summary = build(config, run_id="null")
    assert summary["status"] == "completed", summary["errors"]
    wh = Warehouse(config.warehouse.root)
    nodes = wh.read("nodes")
    assert sorted(set(nodes.column("strategy").to_pylist())) == sorted(
        STRATEGIES)
    assert pc.sum(nodes.column("is_format_error")).as_py() == 0
    calls = wh.read("llm_calls")
    assert calls.num_rows > 0
    assert all(model.startswith("null/") for model in set(calls.column("model_fingerprint").to_pylist()))
    assert wh.read("sft_examples").num_rows > 0
