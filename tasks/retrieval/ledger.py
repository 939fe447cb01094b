"""The retrieval ledger and its content-addressed cache (docs/ledger.md).

``LedgerRetriever`` wraps the retriever a shard searches with. Every query it answers becomes one
``retrievals`` row: which run, strategy and question asked, the retriever kind and the index's
fingerprint, ``k``, the passages returned (ids, scores, titles, texts) and the call's latency.
Before asking the wrapped retriever it looks each query up by its cache key (kind, index
fingerprint, query, k) in the rows of this shard and of every earlier run's ``retrievals``
shards; a query found there is answered from that row, so a rebuild of an unchanged config makes
no retrieval call and a paid search API is asked each question once (the call cache of
``tasks/llm/cache.py`` does the same for engine calls).

A row copied from the same run (a shard run again) is kept as it was, ``cached`` flag and
latency included, so the rebuilt shard file equals the lost one; a row copied from another run
is marked ``cached`` and keeps the latency of the call that fetched it. Rows are held per shard
and written by the shard (memory O(shard)).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds

from ragfactory.tasks.retrieval.types import Hit, Retriever
from ragfactory.warehouse.integrity import quick_damage
from ragfactory.warehouse.key_index import KEYS
from ragfactory.warehouse.store import Warehouse

TABLE = "retrievals"
# The question a shard's coroutine expands; asyncio.to_thread carries it to the search thread.
_ASKING: ContextVar[str | None] = ContextVar("ragfactory_retrieval_question", default=None)


@contextmanager
def asking(question_id: str) -> Iterator[None]:
    """Attribute the retrievals made inside the block (and its child tasks) to ``question_id``."""
    token = _ASKING.set(question_id)
    try:
        yield
    finally:
        _ASKING.reset(token)


def _digest(payload: Any, size: int = 32) -> str:
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def index_fingerprint(kind: str, corpus: str, params: Mapping[str, Any] | None = None) -> str:
    """A stable hash of an index's identity: its kind, the corpus it covers (a content digest,
    or a server's URL) and the parameters it was built with."""
    return _digest({"kind": kind, "corpus": corpus, "params": dict(params or {})}, 24)


def cache_key(kind: str, fingerprint: str, query: str, k: int) -> str:
    """The content address of one retrieval: same index, same query, same k."""
    return _digest({"kind": kind, "index": fingerprint, "query": query, "k": int(k)})


class WarehouseRetrievalStore:
    """Earlier ``retrievals`` rows of every run, looked up by cache key with a pushed-down filter
    in the files that may hold the key (``warehouse/key_index.py``).

    ``own`` is the file of the shard asking: its rows answer first, so a shard run again copies
    its own rows (latency included) rather than an equal answer another shard fetched."""

    def __init__(self, warehouse: Warehouse, own: Path | None = None):
        self.warehouse, self.own = warehouse, own
        self._datasets: tuple[ds.Dataset | None, ds.Dataset | None] | None = None

    def _open(self) -> tuple[ds.Dataset | None, ds.Dataset | None]:
        """(own shard's file, every file), listed once: a shard's searches share one listing and
        footer read rather than one per search; rows other shards write meanwhile are not seen."""
        if self._datasets is None:
            # a damaged file (not the size recorded) answers nothing: its queries are asked again
            files = [str(p) for p in self.warehouse.files(TABLE) if quick_damage(self.warehouse.root, p) is None]
            own = ds.dataset([str(self.own)], format="parquet") if str(self.own) in files else None
            self._datasets = (own, ds.dataset(files, format="parquet") if files else None)
        return self._datasets

    def get(self, keys: Sequence[str], run_id: str) -> dict[str, dict]:
        own, every = self._open() if keys else (None, None)
        if every is None:
            return {}
        found = self._scan(own, keys, run_id) if own is not None else {}
        rest = [key for key in keys if key not in found]
        return {**found, **(self._scan(every, rest, run_id) if rest else {})}

    @staticmethod
    def _scan(dataset: ds.Dataset, keys: Sequence[str], run_id: str) -> dict[str, dict]:
        # only the files that may hold a key: scanning every one read all their passages' texts
        files = KEYS.files_holding(dataset.files, "cache_key", keys, dataset.schema)
        if not files:
            return {}
        dataset = ds.dataset(files, format="parquet", schema=dataset.schema)
        table = dataset.to_table(filter=pc.field("cache_key").isin(list(keys)))
        found: dict[str, dict] = {}
        # The run's own row first, then the first run by name: scan order never decides.
        for row in sorted(table.to_pylist(), key=lambda r: (r["run_id"] != run_id, r["run_id"], r["retrieval_id"])):
            found.setdefault(row["cache_key"], row)
        return found


class LedgerRetriever:
    """A ``Retriever`` that answers from the cache when it can and records every query it answers."""

    def __init__(
        self,
        inner: Retriever,
        kind: str,
        fingerprint: str,
        run_id: str,
        strategy: str,
        store: WarehouseRetrievalStore | None = None,
    ):
        self.inner, self.kind, self.fingerprint = inner, kind, fingerprint
        self.run_id, self.strategy, self.store = run_id, strategy, store
        self.calls = 0  # searches that reached the wrapped retriever
        self._known: dict[str, dict] = {}  # cache key -> the row that answers it in this shard
        self._asks: list[tuple[str, str]] = []  # (question id, cache key) in the order asked
        self._lock = threading.Lock()

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        keys = [cache_key(self.kind, self.fingerprint, q, k) for q in queries]
        self._lookup(keys)
        missing = list(dict.fromkeys(key for key in keys if key not in self._known))
        if missing:
            asked = {key: q for key, q in zip(keys, queries)}
            self._fetch([asked[key] for key in missing], missing, k)
        question = _ASKING.get() or ""
        with self._lock:
            self._asks.extend((question, key) for key in keys)
            return [_hits(self._known[key]) for key in keys]

    def _lookup(self, keys: list[str]) -> None:
        wanted = [key for key in dict.fromkeys(keys) if key not in self._known]
        if not wanted or self.store is None:
            return
        for key, row in self.store.get(wanted, self.run_id).items():
            mine = row["run_id"] == self.run_id
            copied = {**row, "run_id": self.run_id, "cached": bool(row["cached"]) if mine else True}
            with self._lock:
                self._known.setdefault(key, copied)

    def _fetch(self, queries: list[str], keys: list[str], k: int) -> None:
        started = time.perf_counter()
        results = self.inner.search(queries, k)
        latency = (time.perf_counter() - started) / max(len(queries), 1)  # one batch, shared evenly
        self.calls += 1
        if len(results) != len(queries):
            raise ValueError(f"retriever answered {len(results)} result lists for {len(queries)} queries")
        with self._lock:
            for query, key, hits in zip(queries, keys, results):
                self._known.setdefault(key, self._fresh(query, key, k, list(hits)[:k], latency))

    def _fresh(self, query: str, key: str, k: int, hits: list[Hit], latency: float) -> dict:
        return {
            "run_id": self.run_id,
            "query": query,
            "retriever": self.kind,
            "index_fingerprint": self.fingerprint,
            "k": int(k),
            "passage_ids": [h.passage_id for h in hits],
            "scores": [float(h.score) for h in hits],
            "titles": [h.title for h in hits],
            "texts": [h.text for h in hits],
            "latency_s": latency,
            "cached": False,
            "cache_key": key,
        }

    def rows(self, node_of: Mapping[tuple[str, tuple[str, ...]], str] | None = None) -> list[dict]:
        """The shard's rows, one per query asked, ordered by (question, query, k, occurrence) so
        the order questions ran in never changes the file. ``node_of`` maps (question id,
        returned passage ids) to the node that holds those passages."""
        node_of = node_of or {}
        seen: dict[tuple[str, str], int] = {}
        out = []
        for question, key in sorted(self._asks, key=lambda a: (a[0], self._known[a[1]]["query"], a[1])):
            nth = seen[(question, key)] = seen.get((question, key), -1) + 1
            row = self._known[key]
            out.append(
                {
                    **row,
                    "retrieval_id": _digest([self.run_id, self.strategy, question, key, nth]),
                    "strategy": self.strategy,
                    "question_id": question or None,
                    "node_id": node_of.get((question, tuple(row["passage_ids"]))),
                }
            )
        return out


def _hits(row: Mapping) -> list[Hit]:
    return [
        Hit(pid, title, text, float(score))
        for pid, title, text, score in zip(row["passage_ids"], row["titles"], row["texts"], row["scores"])
    ]


def nodes_by_passages(nodes: Sequence[Mapping]) -> dict[tuple[str, tuple[str, ...]], str]:
    """(question id, passage ids) -> the first node (in row order) that holds exactly those passages."""
    found: dict[tuple[str, tuple[str, ...]], str] = {}
    for node in nodes:
        if node.get("passage_ids"):
            found.setdefault((node["question_id"], tuple(node["passage_ids"])), node["node_id"])
    return found


def open_ledger(
    warehouse: Warehouse, sources: list[str], config: Any, run_id: str, strategy: str, shard: str | None = None
) -> LedgerRetriever:
    """The build config's retriever over ``sources``, wrapped in a ledger backed by the
    warehouse's ``retrievals`` rows. The index fingerprint names the kind, the corpus (the
    passages' content digest, or the server's URL) and the parameters that change results."""
    from ragfactory.tasks.retrieval.corpus import WarehousePassages

    passages = None if config.server_url else WarehousePassages(warehouse, sources)
    return ledgered(warehouse, sources, passages, config, run_id, strategy, shard)


def ledgered(
    warehouse: Warehouse,
    sources: list[str],
    passages: Any,
    config: Any,
    run_id: str,
    strategy: str,
    shard: str | None = None,
) -> LedgerRetriever:
    """``open_ledger`` over passages the caller already opened (None: the configured server)."""
    from ragfactory.tasks.retrieval.corpus import open_retriever

    inner = open_retriever(warehouse, sources, config, passages=passages)
    kind = "http" if config.server_url else config.default
    corpus = config.server_url if passages is None else passages.digest()
    params = {"bm25": config.bm25.model_dump(), "dense": config.dense.model_dump(exclude={"device", "batch_size"})}.get(
        kind, {}
    )
    fingerprint = index_fingerprint(kind, corpus, params)
    own = warehouse.shard_path(TABLE, {"run_id": run_id}, shard) if shard else None
    return LedgerRetriever(inner, kind, fingerprint, run_id, strategy, WarehouseRetrievalStore(warehouse, own))
