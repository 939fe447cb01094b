"""The content-addressed completion cache behind ``llm_calls`` (docs/architecture.md, "Core contracts").

Every completion is one ``llm_calls`` row keyed by ``types.call_id`` (model fingerprint, messages,
sampling, seed, sample index). Before calling an engine the scheduler asks a ``CallCache`` for the
ids it needs: rows found in earlier runs (or earlier in this shard) are answered without an
engine call. The cache records every row a shard *used*, hits included: a hit is copied from its
original row (text, timings, ``created_at``) with only ``run_id`` replaced, so rebuilding a run
with the same config rewrites byte-for-byte the same table rows and makes no engine call.

Lookups go to a ``CallStore``: ``WarehouseCallStore`` scans, with a pushed-down ``call_id``
filter, the ``llm_calls`` shards of every run that may hold one of the ids (each file's ids are
read once, ``warehouse/key_index.py``), one lookup per engine batch rather than per request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import pyarrow.compute as pc
import pyarrow.dataset as ds

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.llm.types import Completion, Request
from ragfactory.warehouse.key_index import KEYS
from ragfactory.warehouse.store import Warehouse

TABLE = "llm_calls"


def utc_now() -> datetime:
    return datetime.now(UTC)


class CallStore(Protocol):
    """Where earlier completions are looked up: call id -> ``llm_calls`` row (``prefer``: the run
    whose own row answers first, so a shard run again copies its rows as they were)."""

    def get(self, call_ids: Sequence[str], prefer: str | None = None) -> dict[str, dict]: ...


class MemoryCallStore:
    """Rows held in memory (tests, or a cache carried between builds in one process)."""

    def __init__(self, rows: Iterable[Mapping] = ()):
        self._rows: dict[str, dict] = {}
        for row in rows:
            self._rows.setdefault(row["call_id"], dict(row))

    def get(self, call_ids: Sequence[str], prefer: str | None = None) -> dict[str, dict]:
        return {cid: dict(self._rows[cid]) for cid in call_ids if cid in self._rows}


class WarehouseCallStore:
    """The ``llm_calls`` table of a warehouse, across all runs."""

    def __init__(self, warehouse: Warehouse):
        self.warehouse = warehouse

    def get(self, call_ids: Sequence[str], prefer: str | None = None) -> dict[str, dict]:
        schema = table_spec(TABLE).schema
        files = KEYS.files_holding([str(path) for path in self.warehouse.files(TABLE)], "call_id", call_ids, schema)
        if not files:
            return {}
        dataset = ds.dataset(files, format="parquet", schema=schema)
        table = dataset.to_table(filter=pc.field("call_id").isin(list(call_ids)))
        found: dict[str, dict] = {}
        # Several runs may hold the same call (each copies the rows it used); they agree on
        # everything but run_id (and who asked), and the preferred run's row, else the oldest, is
        # kept so the choice does not depend on scan order.
        for row in sorted(table.to_pylist(), key=lambda r: (r["run_id"] != prefer, r["created_at"], r["run_id"])):
            found.setdefault(row["call_id"], row)
        return found


class CallCache:
    """The calls one shard of one run used, backed by a store of earlier calls."""

    def __init__(
        self,
        run_id: str,
        store: CallStore | None = None,
        clock: Callable[[], datetime] = utc_now,
    ):
        if not run_id:
            raise ValueError("CallCache needs a run_id: every llm_calls row belongs to one run")
        self.run_id = run_id
        self.store = store if store is not None else MemoryCallStore()
        self.clock = clock
        self._used: dict[str, dict] = {}

    @classmethod
    def from_warehouse(cls, warehouse: Warehouse, run_id: str, clock: Callable[[], datetime] = utc_now) -> CallCache:
        return cls(run_id, WarehouseCallStore(warehouse), clock)

    def __len__(self) -> int:
        return len(self._used)

    def fetch(self, call_ids: Iterable[str]) -> dict[str, dict]:
        """The rows known for these ids; each one found is recorded as used by this shard."""
        wanted = list(dict.fromkeys(call_ids))
        found = {cid: self._used[cid] for cid in wanted if cid in self._used}
        missing = [cid for cid in wanted if cid not in found]
        if missing:
            for cid, row in self.store.get(missing, prefer=self.run_id).items():
                # A row of this run stays as it was; one another run generated is marked cached.
                cached = bool(row.get("cached")) if row.get("run_id") == self.run_id else True
                self._used[cid] = found[cid] = {**row, "run_id": self.run_id, "cached": cached}
        return found

    def record(
        self,
        cid: str,
        fingerprint: str,
        request: Request,
        sample_index: int,
        completion: Completion,
    ) -> dict:
        """Record a fresh engine completion as a new ``llm_calls`` row and return the row.

        The first completion recorded for a call id stays: when two engine calls generated the
        same id at once (two shards whose loops each run a continuous engine's calls), every
        question reads the one row the table keeps."""
        row = {
            "call_id": cid,
            "run_id": self.run_id,
            "role": request.role,
            "model_fingerprint": fingerprint,
            "messages": request.messages_json(),
            "sampling": json.dumps(request.sampling.key(), sort_keys=True),
            "seed": request.sampling.seed,
            "sample_index": sample_index,
            "text": completion.text,
            "finish_reason": completion.finish_reason,
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "latency_s": completion.latency_s,
            "created_at": self.clock(),
            "strategy": None,
            "question_id": dict(request.tags).get("question_id"),
            "node_id": None,
            "cached": False,
            **token_columns(completion),
        }
        return self._used.setdefault(cid, row)

    def attribute(self, strategy: str, asked_by: Mapping[str, tuple[str | None, str | None]]) -> None:
        """Name who asked each call this shard used: its strategy, and the (question, node) of
        the rows that hold the call (``asked_by``); request metadata, never part of a call id.
        A call no row holds keeps the question its request was tagged with."""
        for cid, row in self._used.items():
            question, node = asked_by.get(cid, (row.get("question_id"), None))
            row.update(strategy=strategy, question_id=question, node_id=node)

    def rows(self) -> list[dict]:
        """The shard's rows ordered by call id, so scheduling order never changes the file."""
        return [self._used[cid] for cid in sorted(self._used)]

    def write(self, warehouse: Warehouse, shard: str) -> Path:
        """Write the rows this shard used as its ``llm_calls`` shard (empty shards included)."""
        return warehouse.write(TABLE, self.rows(), shard=shard, partition={"run_id": self.run_id})


def token_columns(completion: Completion) -> dict:
    """The token columns of a completion's row, None where the engine gave none. Held as numpy
    int32 / float32 arrays: a shard keeps every row it used, and a Python list of ids costs ~36
    bytes a token (an int object and its pointer) where the array costs 4."""
    import numpy as np

    def packed(values, dtype):
        return None if values is None else np.asarray(values, dtype=dtype)

    return {
        "prompt_token_ids": packed(completion.prompt_token_ids, np.int32),
        "completion_token_ids": packed(completion.completion_token_ids, np.int32),
        "completion_logprobs": packed(completion.completion_logprobs, np.float32),
        "tokenizer_fingerprint": completion.tokenizer_fingerprint,
    }


def completion_from_row(row: Mapping, cached: bool) -> Completion:
    """The ``Completion`` a strategy sees for an ``llm_calls`` row."""
    return Completion(
        text=row["text"],
        finish_reason=row["finish_reason"],
        prompt_tokens=int(row["prompt_tokens"] or 0),
        completion_tokens=int(row["completion_tokens"] or 0),
        latency_s=float(row["latency_s"] or 0.0),
        call_id=row["call_id"],
        cached=cached,
    )
