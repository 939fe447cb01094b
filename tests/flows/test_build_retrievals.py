"""The retrieval ledger and cache through a real DecEx build (docs/ledger.md).

The retriever is a counting fake registered as a plugged kind, the way a real retriever is
found; the flow, tasks, batcher, call cache and warehouse are real. Every query lands in
``retrievals`` with the asking question, and a shard run again is answered from the ledger
alone: no retrieval call, the same rows.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.retrieval.factory import register_retriever, unregister_retriever
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import FunctionRetriever, ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import decex_policy

GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=3).questions}
KIND = "test:counting"


def _hits(query: str, k: int) -> list[Hit]:
    return [Hit(f"{query}#{i}", f"title {i}", f"text {i} for {query}", 1.0 - i / 4) for i in range(k)]


@pytest.fixture
def counting():
    retriever = FunctionRetriever(_hits)
    register_retriever(KIND, lambda **_: retriever)
    try:
        yield retriever
    finally:
        unregister_retriever(KIND)


def _config(root) -> BuildConfig:
    return BuildConfig.model_validate(
        {
            "name": "ledger-test",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "hotpotqa", "limit": 3}],
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
            "retrieval": {"default": KIND, "bm25": {"enabled": False}, "dense": {"enabled": False}},
            "llm": scripted_llm(max_in_flight=3),
            "search": {
                "strategies": ["decex"],
                "shard_size": 2,
                "decex": {
                    "k": 2,
                    "n_rollouts": 1,
                    "t_max": 2,
                    "termination_samples": 1,
                    "top_k": 2,
                    "no_pruning": True,
                },
            },  # every sub-question searches
        }
    )


def test_a_rerun_shard_replays_its_retrievals_from_the_ledger(tmp_path, engines, counting):
    engines(ScriptedBackend(decex_policy(GOLD)))
    root = tmp_path / "wh"
    first = build(_config(root))
    assert first["status"] == "completed", first
    wh = Warehouse(root)
    calls = len(counting.batches)
    assert calls > 0
    rows = query(wh, "select * from retrievals order by retrieval_id").to_pylist()
    asked = [q for batch in counting.batches for q in batch]
    # one row per query asked (a query asked again is a row of its own, answered from the ledger)
    assert len(rows) >= len(set(asked)) and {r["query"] for r in rows} == set(asked)
    for row in rows:
        assert row["strategy"] == "decex_no_pruning" and row["retriever"] == KIND and row["k"] == 2
        assert row["question_id"] is not None and row["cached"] is False
        assert row["passage_ids"] == [f"{row['query']}#0", f"{row['query']}#1"] and row["scores"] == [1.0, 0.75]
    assert len({r["index_fingerprint"] for r in rows}) == 1
    assert all(r["node_id"] is not None for r in rows), "each search's passages are held by a node"

    # The engine calls and rollouts say who asked and how the build scored, without a join.
    calls_by = query(
        wh,
        """select strategy, count(*) filter (where question_id is null) as no_question,
                                   count(*) filter (where node_id is null) as no_node, bool_or(cached) as cached
                            from llm_calls group by all""",
    ).to_pylist()
    assert calls_by == [{"strategy": "decex_no_pruning", "no_question": 0, "no_node": 0, "cached": False}]
    metrics = query(wh, "select distinct metric, metric_score = f1 as same from rollouts").to_pylist()
    assert metrics == [{"metric": "f1", "same": True}]
    [cost] = query(wh, "select * from run_cost").to_pylist()
    assert cost["strategy"] == "decex_no_pruning" and cost["retrievals"] == len(rows)
    assert cost["retrieval_calls"] == len(set(asked)) and cost["sft_examples"] == first["exports"][0]["sft_examples"]

    # Both shards run again (their nodes files are gone); the ledger answers every query.
    for shard in ("decex-0000", "decex-0001"):
        wh.shard_path("nodes", {"run_id": first["run_id"]}, shard).unlink()
    files = {p.name: pq.read_table(p) for p in wh.files("retrievals")}
    again = build(_config(root))
    assert [s["cached"] for s in again["shards"]] == [False, False]
    assert len(counting.batches) == calls, "the rerun called the retriever"
    rebuilt = query(wh, "select * from retrievals order by retrieval_id").to_pylist()
    assert rebuilt == rows
    assert {p.name: pq.read_table(p) for p in wh.files("retrievals")}.keys() == files.keys()
    for path in wh.files("retrievals"):
        assert pq.read_table(path).equals(files[path.name]), path


def test_another_run_marks_its_retrievals_cached_and_keeps_their_latency(tmp_path, engines, counting):
    engines(ScriptedBackend(decex_policy(GOLD)))
    root = tmp_path / "wh"
    first = build(_config(root))
    calls = len(counting.batches)
    second = build(_config(root), run_id="ledger-other")
    assert second["status"] == "completed" and len(counting.batches) == calls
    wh = Warehouse(root)
    sql = "select query, latency_s, cached, passage_ids from retrievals where run_id = $run order by all"
    mine = query(wh, sql, {"run": first["run_id"]}).to_pylist()
    other = query(wh, sql, {"run": "ledger-other"}).to_pylist()
    assert [r["cached"] for r in other] == [True] * len(mine)
    assert [(r["query"], r["passage_ids"]) for r in other] == [(r["query"], r["passage_ids"]) for r in mine]
    # the latency kept is that of a call the first run made for the query (one per shard asking it)
    for row in other:
        assert row["latency_s"] in {r["latency_s"] for r in mine if r["query"] == row["query"]}
