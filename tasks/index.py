"""Prefect task for the index stage: the build's passages -> persisted BM25 and dense indexes.

An index is keyed by the content it covers and its settings, so a rebuild over unchanged
passages loads the saved index instead of rebuilding it (``tasks/retrieval/index_store.py``).
The passages stream from the warehouse in batches, so the stage's memory does not grow with the
corpus (docs/corpus.md). A passage id two sources give different passages is a ``rejects`` row
naming both files, and one warning line (``tasks/retrieval/conflicts.py``).
"""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task

from ragfactory.tasks.data.corpus import corpus_lines
from ragfactory.tasks.data.jsonl import make_reject
from ragfactory.tasks.retrieval.config import RetrievalConfig
from ragfactory.tasks.retrieval.conflicts import Conflict, conflicts_warning, source_files
from ragfactory.tasks.retrieval.corpus import WarehousePassages, open_retriever
from ragfactory.tasks.retry import retry_unless_permanent
from ragfactory.warehouse.store import Warehouse

CONFLICTS_SHARD = "conflicts"  # the rejects shard of a source's passages an index does not hold


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
    if summary and (conflicts := passages.conflicts()):
        logger.warning(record_conflicts(wh, conflicts))
    return summary


def record_conflicts(wh: Warehouse, conflicts: list[Conflict]) -> str:
    """Write a ``rejects`` row for each passage an index does not hold (its file and line, the
    id and the file whose passage the index holds); returns the warning line that names them."""
    sources = source_files(wh, sorted({c.kept for c in conflicts} | {c.dropped for c in conflicts}))
    files = {source: file for source, (file, _) in sources.items()}
    for source in sorted({c.dropped for c in conflicts}):
        file, kind = sources.get(source, (source, ""))
        dropped = [c for c in conflicts if c.dropped == source]
        found = Path(file).is_file() and kind == "corpus"
        lines = corpus_lines(Path(file), {c.passage_id for c in dropped}) if found else {}
        rows = []
        for conflict in dropped:
            number, text = lines.get(conflict.passage_id, (0, ""))
            rows.append(make_reject(source, file, number, _reason(conflict, files), text))
        wh.merge("rejects", rows, CONFLICTS_SHARD, partition={"dataset": source})
    return f"{conflicts_warning(conflicts, files)}; each other one is a rejects row"


def _reason(conflict: Conflict, files: dict[str, str]) -> str:
    return (
        f"passage id {conflict.passage_id!r} is also in {files.get(conflict.kept, conflict.kept)} with another "
        "passage: the index holds that one, never this one (ids must be unique across a corpus's files)"
    )
