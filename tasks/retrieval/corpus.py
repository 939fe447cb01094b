"""A build's passages and a retriever over them, read from the warehouse's ``corpus`` table.

The build's index stage (``tasks/index.py``), evaluation and agentic training open the same
retriever over the same passages this way, so an index built once is loaded by all of them.
"""

from __future__ import annotations

import pyarrow as pa

from ragfactory.tasks.retrieval.config import RetrievalConfig
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse

CORPUS_SQL = """
with wanted as (
    select passage_id, title, text
    from corpus
    where list_has_any(sources, $sources)
)
select * from wanted order by passage_id
"""


def corpus_passages(warehouse: Warehouse, sources: list[str]) -> pa.Table:
    """The deduplicated passages of the given sources, in a stable order."""
    return query(warehouse, CORPUS_SQL, {"sources": sources})


def open_retriever(
    warehouse: Warehouse, sources: list[str], config: RetrievalConfig, kind: str | None = None,
    passages: pa.Table | None = None,
):
    """The retriever of ``kind`` (default: the config's) over the sources' passages.

    A configured ``server_url`` wins; a local index is loaded from disk when already built.
    ``passages`` saves re-reading the corpus when several indexes cover the same sources.
    """
    from ragfactory.tasks.retrieval.factory import make_retriever, make_retriever_from_config

    if config.server_url and kind is None:
        return make_retriever_from_config(config)
    if passages is None:
        passages = corpus_passages(warehouse, sources)
    return make_retriever(
        kind or config.default, passages=passages,
        index_root=warehouse.artifacts_dir("indexes"), bm25=config.bm25, dense=config.dense,
    )
