"""A build's passages and a retriever over them, read from the warehouse's ``corpus`` view.

The build's index stage (``tasks/index.py``), evaluation and agentic training open the same
retriever over the same passages this way, so an index built once is loaded by all of them.
The corpus is never read whole: ``WarehousePassages`` streams the sources' ``passages`` files in
path order, batch by batch, keeping the first row of each passage id (the ids met so far are
64-bit hashes, 8 bytes a passage; a SQL ``group by``/``order by`` over the text instead holds
the corpus in DuckDB's memory, 1 GB at 250k passages); an id met again with another passage is
a conflict (``tasks/retrieval/conflicts.py``). Its content digest, which names the
index folder, is kept beside the indexes with the conflicts under a signature of the ``passages`` files, so a
process opening an index that exists reads no passage at all. With a ``server_url`` configured
no process but the server touches the corpus.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ragfactory.atomic import atomic_write_text
from ragfactory.tasks.data.corpus import SeenIds
from ragfactory.tasks.retrieval.config import RetrievalConfig
from ragfactory.tasks.retrieval.conflicts import Conflict, find_conflicts, first_seen
from ragfactory.tasks.retrieval.index_store import BATCH_ROWS, PASSAGE_COLUMNS, digest_batches, select_passages
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.integrity import read_entry
from ragfactory.warehouse.store import Warehouse


@dataclass(frozen=True)
class CorpusRead:
    batch_rows: int = BATCH_ROWS  # passages per batch handed to an index builder


def passages_signature(warehouse: Warehouse) -> str:
    """A hash of every ``passages`` file's path and recorded sha256 (size and mtime when the
    file has no manifest entry): it changes whenever any passage may have."""
    digest = hashlib.sha256()
    for path in warehouse.files("passages"):
        entry = read_entry(warehouse.root, path) or {}
        stat = path.stat()
        mark = entry.get("sha256") or f"{stat.st_size}:{stat.st_mtime_ns}"
        digest.update(f"{path.relative_to(warehouse.root).as_posix()}\0{mark}\n".encode())
    return digest.hexdigest()


class WarehousePassages:
    """The passages of ``sources``, each id once (its first row in path order), as a
    ``PassageSource``; ``conflicts()`` names the ids whose later rows say something else."""

    def __init__(self, warehouse: Warehouse, sources: list[str], read: CorpusRead = CorpusRead()):
        self.warehouse, self.sources, self.read = warehouse, sorted(sources), read
        self._digest: str | None = None
        self._repeats: set[str] | None = None  # the ids met twice in the last whole pass
        self._conflicts: list[Conflict] | None = None

    def files(self) -> list[Path]:
        return sorted(path for source in self.sources for path in self.warehouse.files("passages", source=source))

    def batches(self) -> Iterator[pa.Table]:
        seen, repeats = SeenIds(), set()
        for path in self.files():
            for batch in pq.ParquetFile(path).iter_batches(self.read.batch_rows, columns=list(PASSAGE_COLUMNS)):
                keep = first_seen(seen, repeats, batch.column("passage_id").to_pylist())
                rows = pa.Table.from_batches([batch]).filter(pa.array(keep, pa.bool_()))
                if rows.num_rows:
                    yield select_passages(rows)
        self._repeats = repeats

    def _cache(self) -> Path:
        key = f"{passages_signature(self.warehouse)}-{','.join(self.sources)}"
        name = hashlib.sha256(key.encode()).hexdigest()[:24]
        return self.warehouse.artifacts_dir("indexes", "_digests") / f"{name}.json"

    def digest(self) -> str:
        """The content digest, from the cache when the ``passages`` files are unchanged."""
        if self._digest is None:
            cache = self._cache()
            if cache.is_file():
                cached = json.loads(cache.read_text(encoding="utf-8"))
                self._digest = cached["digest"]
                if cached.get("conflicts") is not None:
                    self._conflicts = [Conflict(**c) for c in cached["conflicts"]]
            else:
                self._digest = digest_batches(self.batches())
                self._conflicts = find_conflicts(self.files(), self._repeats or set())
                self._save(cache)
        return self._digest

    def conflicts(self) -> list[Conflict]:
        """The ids two sources give different passages, the index holding the first source's;
        kept in the digest's cache, so a process opening an index that exists reads no passage."""
        self.digest()
        if self._conflicts is None:  # a cache written before conflicts were kept in it
            if self._repeats is None:
                self._repeats = set()
                seen = SeenIds()
                for path in self.files():
                    for batch in pq.ParquetFile(path).iter_batches(self.read.batch_rows, columns=["passage_id"]):
                        first_seen(seen, self._repeats, batch.column(0).to_pylist())
            self._conflicts = find_conflicts(self.files(), self._repeats)
            self._save(self._cache())
        return self._conflicts

    def _save(self, cache: Path) -> None:
        conflicts = [c.as_json() for c in self._conflicts or []]
        text = json.dumps({"sources": self.sources, "digest": self._digest, "conflicts": conflicts})
        atomic_write_text(cache, text)

    def count(self) -> int:
        sql = "select count(*) as n from corpus where list_has_any(sources, $sources)"
        return query(self.warehouse, sql, {"sources": self.sources}).column("n")[0].as_py()


def open_retriever(
    warehouse: Warehouse,
    sources: list[str],
    config: RetrievalConfig,
    kind: str | None = None,
    passages: pa.Table | WarehousePassages | None = None,
):
    """The retriever of ``kind`` (default: the config's) over the sources' passages.

    A configured ``server_url`` wins (the corpus is not read); a local index is loaded from disk
    when already built, reading no passage. ``passages`` (a table or a ``WarehousePassages``)
    saves work when several indexes cover the same sources.
    """
    from ragfactory.tasks.retrieval.factory import make_retriever, make_retriever_from_config

    if config.server_url and kind is None:
        return make_retriever_from_config(config)
    if passages is None:
        passages = WarehousePassages(warehouse, sources)
    return make_retriever(
        kind or config.default,
        passages=passages,
        index_root=warehouse.artifacts_dir("indexes"),
        bm25=config.bm25,
        dense=config.dense,
    )
