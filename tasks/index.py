"""Prefect task for the index stage: the build's passages -> persisted BM25 and dense indexes.

An index is keyed by the content it covers and its settings, so a rebuild over unchanged
passages loads the saved index instead of rebuilding it (``tasks/retrieval/index_store.py``).
"""

from __future__ import annotations

import pyarrow as pa
from prefect import get_run_logger, task

from ragfactory.tasks.retrieval.config import RetrievalConfig
from ragfactory.tasks.retry import retry_unless_permanent
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


def enabled_kinds(config: RetrievalConfig) -> list[str]:
    return [kind for kind in ("bm25", "dense") if getattr(config, kind).enabled]


@task(retries=1, retry_delay_seconds=5, retry_condition_fn=retry_unless_permanent,
      task_run_name="index-{sources}")
def build_indexes(root: str, sources: list[str], config: RetrievalConfig) -> dict:
    """Build (or load) each enabled index; returns where each lives and whether it was built."""
    logger = get_run_logger()
    wh, summary = Warehouse(root), {}
    passages = corpus_passages(wh, sorted(sources))
    for name in enabled_kinds(config):
        retriever = open_retriever(wh, sorted(sources), config, name, passages)
        summary[name] = {"path": str(retriever.index_dir), "built": not retriever.is_loaded}
        logger.info("%s index %s: %s", name, "loaded" if retriever.is_loaded else "built", retriever.index_dir)
    return summary
