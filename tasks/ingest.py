"""Prefect tasks for the ingest stage: dataset and corpus files -> questions, passages, rejects.

Each task reads one file, calls the pure loaders in ``tasks/data``, and adds its rows to one shard
per table, returning only counts, its version and its warnings (docs/architecture.md, "The data
flow": tasks pass table locations, not rows). Every question gets its train / valid / test partition
as it lands (``tasks/data/partitions.py``); ``backfill_partitions`` gives one to the questions a
warehouse holds from before partitions existed, rewriting those shards in place.

Ingest never removes a row another run may have read (``tasks/data/versions.py`` says why and
how): rows are merged into the source's shards by key, and the ``ingests`` row of the version,
written last, records which questions this ingest produced. An ``ingests`` row already there
(intact) means the same file with the same options was ingested before: the task does nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pyarrow.parquet as pq
from prefect import get_run_logger, task

from ragfactory.tasks.data.config import DatasetConfig, PartitionConfig
from ragfactory.tasks.data.corpus import BATCH_SIZE as CORPUS_BATCH
from ragfactory.tasks.data.corpus import iter_corpus
from ragfactory.tasks.data.jsonl import MAX_PASSAGE_CHARS, JsonlLimits
from ragfactory.tasks.data.loaders import bundled_path, load_questions
from ragfactory.tasks.data.partitions import PartitionRule, backfill_partitions, lacks_partitions, with_partitions
from ragfactory.tasks.data.versions import empty_source_warning, file_sha256, ingest_version, moved_partitions_warning
from ragfactory.tasks.retry import retry_unless_permanent
from ragfactory.warehouse.integrity import is_intact
from ragfactory.warehouse.store import Warehouse, conform, safe_name

PARTITION_COLUMNS = ("partition", "sample_key")  # a question keeps the partition it first got


def dataset_file(dataset: DatasetConfig) -> Path:
    return bundled_path(dataset.name) if dataset.path == "bundled" else Path(dataset.path)


def recorded_ingest(wh: Warehouse, dataset: str, version: str) -> dict | None:
    """The ``ingests`` row of a version, when its shard is on disk as the warehouse wrote it."""
    path = wh.shard_path("ingests", {"dataset": dataset}, version)
    return pq.read_table(path).to_pylist()[0] if is_intact(wh.root, path) else None


def record_ingest(wh: Warehouse, row: dict) -> dict:
    """Write a version's ``ingests`` row (the commit marker of its ingest); returns the summary
    the build flow reads (source, version, counts, warnings). Under the shard's lock, like the
    rows it describes: two processes ingesting one version at once must not interleave the
    renames of the file and its manifest entry."""
    row = {**row, "created_at": dt.datetime.now(dt.UTC)}
    wh.merge("ingests", [row], row["version"], partition={"dataset": row["dataset"]})
    return summary(row, cached=False)


def summary(row: dict, cached: bool) -> dict:
    return {
        "source": row["dataset"],
        "version": row["version"],
        "questions": row["n_questions"],
        "passages": row["n_passages"],
        "rejects": row["n_rejects"],
        "warnings": list(row["warnings"] or []),
        "cached": cached,
    }


def already_ingested(wh: Warehouse, name: str, version: str, path: Path) -> dict | None:
    """The summary of a version ingested before (logging it and its warnings again), or None."""
    row = recorded_ingest(wh, name, version)
    if row is None:
        return None
    logger = get_run_logger()
    logger.info(
        "%s: version %s of %s already ingested (%d questions); nothing to do", name, version, path, row["n_questions"]
    )
    for warning in row["warnings"] or []:
        logger.warning(warning)
    return summary(row, cached=True)


@task(
    retries=2,
    retry_delay_seconds=[2, 10],
    retry_condition_fn=retry_unless_permanent,
    task_run_name="ingest-{dataset.name}",
)
def ingest_dataset(
    root: str, dataset: DatasetConfig, rule: PartitionRule | None = None, max_passage_chars: int = MAX_PASSAGE_CHARS
) -> dict:
    """Add one dataset file's questions (partitioned by ``rule``, default the dataset's default
    rule), passages and rejects to its shards; returns its version, counts and warnings."""
    path, rule, wh = dataset_file(dataset), rule or PartitionConfig().rule_for(dataset), Warehouse(root)
    options = _dataset_options(dataset, rule, max_passage_chars)
    sha = file_sha256(path)
    version = ingest_version(sha, options)
    if (done := already_ingested(wh, dataset.name, version, path)) is not None:
        return done
    result = load_questions(
        path,
        dataset.name,
        dataset.resolved_format,
        dataset.split,
        dataset.limit,
        JsonlLimits.for_passages(max_passage_chars),
    )
    warnings = _merge_dataset(wh, dataset, path, rule, result)
    _log(dataset.name, version, path, len(result.questions), len(result.passages), len(result.rejects), warnings)
    return record_ingest(
        wh,
        {
            "version": version,
            "dataset": dataset.name,
            "kind": "dataset",
            "source_file": str(path),
            "source_sha256": sha,
            "options": json.dumps(options, sort_keys=True),
            "n_questions": len(result.questions),
            "n_passages": len(result.passages),
            "n_rejects": len(result.rejects),
            "question_ids": [q["question_id"] for q in result.questions],
            "warnings": warnings,
        },
    )


def _dataset_options(dataset: DatasetConfig, rule: PartitionRule, max_passage_chars: int) -> dict:
    """What a dataset's ingest depends on besides its file: with the file's sha256, its version."""
    return {
        "kind": "dataset",
        "dataset": dataset.name,
        "format": dataset.resolved_format,
        "split": dataset.split,
        "limit": dataset.limit,
        "partition_rule": dataclasses.asdict(rule),
        "max_passage_chars": max_passage_chars,
    }


def _merge_dataset(wh: Warehouse, dataset: DatasetConfig, path: Path, rule: PartitionRule, result) -> list[str]:
    """Merge a loaded dataset's passages, rejects and partitioned questions into the shard of its
    split; returns the warnings (an empty source, questions whose partition moved)."""
    shard = safe_name(dataset.split)
    wh.merge("passages", result.passages, shard, partition={"source": dataset.name})
    wh.merge("rejects", result.rejects, shard, partition={"dataset": dataset.name})
    merged = wh.merge(
        "questions",
        with_partitions(result.questions, rule),
        shard,
        partition={"dataset": dataset.name},
        keep=PARTITION_COLUMNS,
    )
    return [
        w
        for w in (
            empty_source_warning("dataset", dataset.name, path, len(result.questions), len(result.rejects)),
            moved_partitions_warning(dataset.name, merged.kept),
        )
        if w
    ]


@task(
    retries=2,
    retry_delay_seconds=[2, 10],
    retry_condition_fn=retry_unless_permanent,
    task_run_name="ingest-corpus-{path}",
)
def ingest_corpus(
    root: str, path: str, max_passage_chars: int = MAX_PASSAGE_CHARS, batch_size: int = CORPUS_BATCH
) -> dict:
    """Add one Search-R1 / FlashRAG corpus file's passages to its shards (bad lines, and passages
    over ``max_passage_chars``, to rejects); returns its version, counts and warnings.

    The file streams through in batches of ``batch_size`` passages, each merged into a shard of
    its own (``corpus-00000``, ``corpus-00001``, …) and released, so memory does not grow with
    the corpus. A file re-ingested unchanged merges into the same shards and changes none."""
    source, file, wh = safe_name(Path(path).stem), Path(path), Warehouse(root)
    options = {"kind": "corpus", "source": source, "max_passage_chars": max_passage_chars}
    sha = file_sha256(file)
    version = ingest_version(sha, options)
    if (done := already_ingested(wh, source, version, file)) is not None:
        return done
    n_passages, n_rejects = write_corpus_shards(wh, file, source, max_passage_chars, batch_size)
    warning = empty_source_warning("corpus", source, file, n_passages, n_rejects)
    warnings = [warning] if warning else []
    _log(source, version, file, 0, n_passages, n_rejects, warnings)
    return record_ingest(
        wh,
        {
            "version": version,
            "dataset": source,
            "kind": "corpus",
            "source_file": str(file),
            "source_sha256": sha,
            "options": json.dumps(options, sort_keys=True),
            "n_questions": 0,
            "n_passages": n_passages,
            "n_rejects": n_rejects,
            "question_ids": [],
            "warnings": warnings,
        },
    )


def write_corpus_shards(
    wh: Warehouse, file: Path, source: str, max_passage_chars: int = MAX_PASSAGE_CHARS, batch_size: int = CORPUS_BATCH
) -> tuple[int, int]:
    """Merge a corpus file into ``passages`` (and ``rejects``) one shard per batch, releasing
    each batch once written; returns (passages, rejects)."""
    n_passages = n_rejects = 0
    batches = iter_corpus(file, source, batch_size, JsonlLimits.for_passages(max_passage_chars))
    for number, batch in enumerate(batches):
        shard = f"corpus-{number:05d}"
        wh.merge("passages", batch.passages, shard, partition={"source": source})
        if batch.rejects:
            wh.merge("rejects", batch.rejects, shard, partition={"dataset": source})
        n_passages, n_rejects = n_passages + len(batch.passages), n_rejects + len(batch.rejects)
    return n_passages, n_rejects


def _log(
    name: str, version: str, path: Path, n_questions: int, n_passages: int, n_rejects: int, warnings: list[str]
) -> None:
    logger = get_run_logger()
    logger.info(
        "%s: %d questions, %d passages, %d rejects from %s (version %s)",
        name,
        n_questions,
        n_passages,
        n_rejects,
        path,
        version,
    )
    for warning in warnings:
        logger.warning(warning)


@task(task_run_name="backfill-partitions")
def backfill_question_partitions(root: str, partitions: PartitionConfig) -> list[str]:
    """Give a partition to every ``questions`` row that has none (shards written before schema 3),
    by the config's rule for its dataset; returns the rewritten shards. Each shard is re-read
    under its lock, so an ingest merging into it at the same time loses no row."""
    wh = Warehouse(root)
    rewritten = []
    for path in wh.files("questions"):
        if not lacks_partitions(pq.read_table(path)):
            continue
        dataset = path.parent.name.split("=", 1)[1]
        with wh.locked("questions", {"dataset": dataset}, path.stem):
            rows = pq.read_table(path)
            if not lacks_partitions(rows):
                continue
            dataset = rows.column("dataset")[0].as_py()
            filled = backfill_partitions(rows, partitions.rule_for(DatasetConfig(name=dataset)))
            wh.write("questions", conform("questions", filled), path.stem, partition={"dataset": dataset})
        rewritten.append(str(path))
    return rewritten
