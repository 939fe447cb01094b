"""The retrieval ledger's cache and rows, without a flow (tasks/retrieval/ledger.py)."""

from __future__ import annotations

import asyncio

from ragfactory.tasks.retrieval.ledger import (
    LedgerRetriever,
    WarehouseRetrievalStore,
    asking,
    cache_key,
    index_fingerprint,
    nodes_by_passages,
)
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.warehouse.store import Warehouse
from tests.fakes import FixedRetriever

HITS = {"capital of france": [Hit("p1", "Paris", "Paris is the capital.", 2.5), Hit("p2", "France", "A country.", 1.0)]}


def _ledger(wh: Warehouse, run_id: str, inner: FixedRetriever) -> LedgerRetriever:
    fingerprint = index_fingerprint("bm25", "corpus-digest", {"k1": 1.5, "b": 0.75})
    return LedgerRetriever(inner, "bm25", fingerprint, run_id, "decex", WarehouseRetrievalStore(wh))


async def _ask(ledger: LedgerRetriever, question: str, queries: list[str], k: int):
    with asking(question):
        return await asyncio.to_thread(ledger.search, queries, k)


def test_fingerprints_name_kind_corpus_and_parameters():
    base = index_fingerprint("bm25", "c1", {"k1": 1.5})
    assert base == index_fingerprint("bm25", "c1", {"k1": 1.5})
    assert (
        len(
            {
                base,
                index_fingerprint("dense", "c1", {"k1": 1.5}),
                index_fingerprint("bm25", "c2", {"k1": 1.5}),
                index_fingerprint("bm25", "c1", {"k1": 1.2}),
            }
        )
        == 4
    )
    assert cache_key("bm25", base, "q", 2) != cache_key("bm25", base, "q", 3)


def test_each_query_is_fetched_once_and_every_ask_is_a_row(tmp_path):
    wh, inner = Warehouse(tmp_path), FixedRetriever(HITS)
    ledger = _ledger(wh, "run-1", inner)
    first = asyncio.run(_ask(ledger, "q2", ["capital of france", "nothing"], 2))
    again = asyncio.run(_ask(ledger, "q1", ["capital of france"], 2))
    assert inner.batches == [["capital of france", "nothing"]] and ledger.calls == 1
    assert first[0] == again[0] == HITS["capital of france"] and first[1] == []
    node = {"question_id": "q1", "node_id": "n-7", "passage_ids": ["p1", "p2"]}
    rows = ledger.rows(nodes_by_passages([node]))
    assert [(r["question_id"], r["query"], r["node_id"], r["cached"]) for r in rows] == [
        ("q1", "capital of france", "n-7", False),
        ("q2", "capital of france", None, False),
        ("q2", "nothing", None, False),
    ]
    assert rows[0]["passage_ids"] == ["p1", "p2"] and rows[0]["scores"] == [2.5, 1.0] and rows[0]["k"] == 2
    assert rows[0]["retrieval_id"] != rows[1]["retrieval_id"]
    wh.write("retrievals", rows, "decex-0000", partition={"run_id": "run-1"})

    # The same run again: its own rows, as they were. Another run: marked cached.
    for run, cached in (("run-1", False), ("run-2", True)):
        fresh = FixedRetriever(HITS)
        replay = _ledger(wh, run, fresh)
        hits = asyncio.run(_ask(replay, "q1", ["capital of france"], 2))
        assert fresh.batches == [] and hits[0] == HITS["capital of france"]
        [row] = replay.rows()
        assert row["cached"] is cached and row["latency_s"] == rows[0]["latency_s"] and row["run_id"] == run


def test_a_search_r1_server_is_asked_each_query_once_across_runs(tmp_path):
    from ragfactory.tasks.retrieval.config import RetrievalConfig
    from ragfactory.tasks.retrieval.ledger import open_ledger
    from tests.retrieval.scripted_server import ScriptedServer

    wh = Warehouse(tmp_path)
    with ScriptedServer() as server:
        config = RetrievalConfig(server_url=server.url)
        first = open_ledger(wh, [], config, "run-1", "r3", shard="r3-0000")
        hits = asyncio.run(_ask(first, "q1", ["alpha", "beta"], 1))
        assert hits == [[Hit("alpha", "alpha", "text of alpha", 1.0)], [Hit("beta", "beta", "text of beta", 1.0)]]
        wh.write("retrievals", first.rows(), "r3-0000", partition={"run_id": "run-1"})
        second = open_ledger(wh, [], config, "run-2", "r3", shard="r3-0000")
        assert asyncio.run(_ask(second, "q1", ["beta", "alpha"], 1)) == [hits[1], hits[0]]
        assert asyncio.run(_ask(second, "q1", ["gamma"], 1)) == [[Hit("gamma", "gamma", "text of gamma", 1.0)]]
    assert [r["queries"] for r in server.requests] == [["alpha", "beta"], ["gamma"]]
    rows = second.rows()
    assert [(r["query"], r["cached"], r["retriever"]) for r in rows] == [
        ("alpha", True, "http"),
        ("beta", True, "http"),
        ("gamma", False, "http"),
    ]
    assert rows[0]["index_fingerprint"] == first.fingerprint  # the server's URL names its index
