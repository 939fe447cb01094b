"""The build flow with TreePS beside DecEx: both trees per question, each with its exports.

The engine is the only double (a scripted policy); flow, tasks, batcher, cache, BM25 index and
warehouse are real.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import treeps_and_decex


@pytest.fixture
def scripted(engines):
    backend = ScriptedBackend(treeps_and_decex)
    engines(backend)
    return backend


def test_treeps_and_decex_build_side_by_side(tmp_path, scripted):
    root = tmp_path / "wh"
    config = BuildConfig.model_validate(
        {
            "name": "treeps-test",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "hotpotqa", "limit": 2}],
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(),
            "search": {
                "strategies": ["decex", "treeps"],
                "decex": {"k": 2, "n_rollouts": 2, "t_max": 1, "termination_samples": 1},
                "treeps": {"n": 4, "depth": 2},
            },
            "export": {"trajectories": {"n_samples": 2}},
        }
    )
    summary = build(config)
    assert summary["status"] == "completed", summary
    assert [(v["shard"], v["rewritten"]) for v in summary["valuations"]] == [("treeps-0000", True)]
    wh = Warehouse(root)
    per_strategy = query(
        wh, "select strategy, count(distinct question_id) as q, count(*) as n from nodes group by 1 order by 1"
    ).to_pylist()
    assert [(r["strategy"], r["q"]) for r in per_strategy] == [("decex", 2), ("treeps", 2)]
    assert query(wh, "select count(*) = count(distinct node_id) as unique_ids from nodes").to_pylist() == [
        {"unique_ids": True}
    ]
    exports = {e["strategy"]: e for e in summary["exports"]}
    assert exports["treeps"]["trajectories"] > 0 and exports["treeps"]["grpo_prompts"] == 2
    assert exports["treeps"]["verl_prompts"] == 2 and exports["treeps"]["step_labels"] > 0
    sampled = query(wh, "select count(*) as n from trajectories where is_sampled").to_pylist()
    assert sampled == [{"n": 4}]
    verl = pq.read_table(wh.root / "artifacts" / "verl" / summary["run_id"] / "treeps.parquet")
    assert verl.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert verl.num_rows == 2
    summary_rows = {r["strategy"]: r for r in query(wh, "select * from strategy_summary").to_pylist()}
    assert summary_rows["treeps"]["n_trajectories"] == exports["treeps"]["trajectories"]
    assert summary_rows["decex"]["n_sft_examples"] == exports["decex"]["sft_examples"]
    depths = query(wh, "select depth, n_kept, mean_value from treeps_tree order by question_id, depth").to_pylist()
    assert {r["depth"] for r in depths} == {0, 1, 2}
    assert all(r["mean_value"] is None or 0.0 <= r["mean_value"] <= 1.0 for r in depths)
    treeps_nodes = query(wh, "select visits, value, is_leaf, reward from nodes where strategy = 'treeps'").to_pylist()
    assert all(r["visits"] is not None for r in treeps_nodes)
    assert all(r["value"] == r["reward"] and r["visits"] == 1 for r in treeps_nodes if r["is_leaf"])


def test_a_rebuild_from_cache_values_nothing_anew_and_calls_no_engine(tmp_path, scripted):
    config = BuildConfig.model_validate(
        {
            "name": "treeps-rebuild",
            "warehouse": {"root": str(tmp_path / "wh")},
            "datasets": [{"name": "hotpotqa", "limit": 2}],
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(),
            "search": {"strategies": ["treeps"], "treeps": {"n": 4, "depth": 2}},
        }
    )
    first = build(config)
    wh = Warehouse(config.warehouse.root)
    nodes = {p: p.read_bytes() for p in wh.files("nodes")}
    calls = scripted.calls
    again = build(config)
    assert again["status"] == "completed" and scripted.calls == calls
    assert [s["cached"] for s in again["shards"]] == [True]
    assert [v["rewritten"] for v in again["valuations"]] == [False]
    assert {p: p.read_bytes() for p in wh.files("nodes")} == nodes
    assert again["exports"] == first["exports"]
