"""Prefect task for the index stage: the build's passages -> persisted BM25 and dense indexes.

An index is keyed by the content it covers and its settings, so a rebuild over unchanged
passages loads the saved index instead of rebuilding it (``tasks/retrieval/index_store.py``).
The passages stream from the warehouse in batches, so the stage's memory does not grow with the
corpus (docs/corpus.md).
"""

from __future__ import annotations

from prefect import get_run_logger, task

from ragfactory.tasks.retrieval.config import RetrievalConfig
from ragfactory.tasks.retrieval.corpus import WarehousePassages, open_retriever
from ragfactory.tasks.retry import retry_unless_permanent
from ragfactory.warehouse.store import Warehouse


def enabled_kinds(config: RetrievalConfig) -> list[str]:
    return [kind for kind in ("bm25", "dense") if getattr(config, kind).enabled]


@task(retries=1, retry_delay_seconds=5, retry_condition_fn=retry_unless_permanent, task_run_name="index-{sources}")
def build_indexes(root: str, sources: list[str], config: RetrievalConfig) -> dict:
    """Build (or load) each enabled index; returns where each lives and whether it was built."""
    logger = get_run_logger()
    wh, summary = Warehouse(root), {}
    passages = WarehousePassages(wh, sorted(sources))  # read in batches, never whole
    for name in enabled_kinds(config):
        retriever = open_retriever(wh, sorted(sources), config, name, passages)
        summary[name] = {"path": str(retriever.index_dir), "built": not retriever.is_loaded}
        logger.info("%s index %s: %s", name, "loaded" if retriever.is_loaded else "built", retriever.index_dir)
    return summary
