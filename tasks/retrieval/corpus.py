"""A build's passages and a retriever over them, read from the warehouse's ``corpus`` view.

The build's index stage (``tasks/index.py``), evaluation and agentic training open the same
retriever over the same passages this way, so an index built once is loaded by all of them.
The corpus is never read whole: ``WarehousePassages`` streams it from DuckDB in batches (DuckDB
spills its sort to disk past ``CorpusRead.memory_limit``), and its content digest, which names
the index folder, is kept beside the indexes under a signature of the ``passages`` files, so a
process opening an index that exists reads no passage at all. With a ``server_url`` configured
no process but the server touches the corpus.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from ragfactory.atomic import atomic_write_text
from ragfactory.tasks.retrieval.config import RetrievalConfig
from ragfactory.tasks.retrieval.index_store import BATCH_ROWS, digest_batches, select_passages
from ragfactory.warehouse.catalog import connect, query
from ragfactory.warehouse.integrity import read_entry
from ragfactory.warehouse.store import Warehouse

CORPUS_SQL = """
with wanted as (
    select passage_id, title, text
    from corpus
    where list_has_any(sources, $sources)
)
select * from wanted order by passage_id
"""


@dataclass(frozen=True)
class CorpusRead:
    batch_rows: int = BATCH_ROWS  # passages per batch handed to an index builder
    memory_limit: str = "1GB"  # DuckDB's own working memory; its sort spills to disk beyond it


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
    """The deduplicated passages of ``sources``, in passage_id order, as a ``PassageSource``."""

    def __init__(self, warehouse: Warehouse, sources: list[str], read: CorpusRead = CorpusRead()):
        self.warehouse, self.sources, self.read = warehouse, sorted(sources), read
        self._digest: str | None = None

    def batches(self) -> Iterator[pa.Table]:
        con = connect(self.warehouse)
        try:
            spill = self.warehouse.artifacts_dir("duckdb-spill")
            con.execute(f"set memory_limit = '{self.read.memory_limit}'")
            con.execute(f"set temp_directory = '{spill}'")
            con.execute("set preserve_insertion_order = false")
            reader = con.sql(CORPUS_SQL, params={"sources": self.sources}).to_arrow_reader(self.read.batch_rows)
            for batch in reader:
                if batch.num_rows:
                    yield select_passages(pa.Table.from_batches([batch]))
        finally:
            con.close()

    def digest(self) -> str:
        """The content digest, from the cache when the ``passages`` files are unchanged."""
        if self._digest is None:
            key = f"{passages_signature(self.warehouse)}-{','.join(self.sources)}"
            name = hashlib.sha256(key.encode()).hexdigest()[:24]
            cache = self.warehouse.artifacts_dir("indexes", "_digests") / f"{name}.json"
            if cache.is_file():
                self._digest = json.loads(cache.read_text(encoding="utf-8"))["digest"]
            else:
                self._digest = digest_batches(self.batches())
                atomic_write_text(cache, json.dumps({"sources": self.sources, "digest": self._digest}))
        return self._digest

    def count(self) -> int:
        sql = "select count(*) as n from corpus where list_has_any(sources, $sources)"
        return query(self.warehouse, sql, {"sources": self.sources}).column("n")[0].as_py()


def open_retriever(
    warehouse: Warehouse, sources: list[str], config: RetrievalConfig, kind: str | None = None,
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
        kind or config.default, passages=passages,
        index_root=warehouse.artifacts_dir("indexes"), bm25=config.bm25, dense=config.dense,
    )
