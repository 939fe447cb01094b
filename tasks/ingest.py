"""Prefect tasks for the ingest stage: dataset and corpus files -> questions, passages, rejects.

Each task reads one file, calls the pure loaders in ``tasks/data``, and writes one shard per
table, returning only counts and locations (DESIGN.md: tasks pass table locations, not rows).
Every question gets its train / valid / test partition as it lands (``tasks/data/partitions.py``);
``backfill_partitions`` gives one to the questions a warehouse holds from before partitions
existed, rewriting those shards in place.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from prefect import get_run_logger, task

from ragfactory.schemas.config import DatasetConfig, PartitionConfig
from ragfactory.tasks.data.corpus import load_corpus
from ragfactory.tasks.data.loaders import bundled_path, load_questions
from ragfactory.tasks.data.partitions import PartitionRule, backfill_partitions, lacks_partitions, with_partitions
from ragfactory.tasks.retry import retry_unless_permanent
from ragfactory.warehouse.store import Warehouse, conform, safe_name


def dataset_file(dataset: DatasetConfig) -> Path:
    return bundled_path(dataset.name) if dataset.path == "bundled" else Path(dataset.path)


@task(retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=retry_unless_permanent,
      task_run_name="ingest-{dataset.name}")
def ingest_dataset(root: str, dataset: DatasetConfig, rule: PartitionRule | None = None) -> dict:
    """Load one dataset file into its questions (partitioned by ``rule``, default the default
    rule of the dataset), passages and rejects shards."""
    path = dataset_file(dataset)
    result = load_questions(path, dataset.name, dataset.resolved_format, dataset.split, dataset.limit)
    rule = rule or PartitionConfig().rule_for(dataset)
    wh = Warehouse(root)
    shard = safe_name(dataset.split)
    wh.write("questions", with_partitions(result.questions, rule), shard, partition={"dataset": dataset.name})
    wh.write("passages", result.passages, shard, partition={"source": dataset.name})
    wh.write("rejects", result.rejects, shard, partition={"dataset": dataset.name})
    get_run_logger().info(
        "%s: %d questions, %d passages, %d rejects from %s",
        dataset.name, len(result.questions), len(result.passages), len(result.rejects), path,
    )
    return {"source": dataset.name, "questions": len(result.questions),
            "passages": len(result.passages), "rejects": len(result.rejects)}


@task(retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=retry_unless_permanent,
      task_run_name="ingest-corpus-{path}")
def ingest_corpus(root: str, path: str) -> dict:
    """Load one Search-R1 / FlashRAG corpus file into a passages shard (bad lines to rejects)."""
    source = safe_name(Path(path).stem)
    result = load_corpus(Path(path), source)
    wh = Warehouse(root)
    wh.write("passages", result.passages, "corpus", partition={"source": source})
    wh.write("rejects", result.rejects, "corpus", partition={"dataset": source})
    get_run_logger().info("%s: %d passages, %d rejects", source, len(result.passages), len(result.rejects))
    return {"source": source, "questions": 0, "passages": len(result.passages), "rejects": len(result.rejects)}


@task(task_run_name="backfill-partitions")
def backfill_question_partitions(root: str, partitions: PartitionConfig) -> list[str]:
    """Give a partition to every ``questions`` row that has none (shards written before schema 3),
    by the config's rule for its dataset; returns the rewritten shards."""
    wh = Warehouse(root)
    rewritten = []
    for path in wh.files("questions"):
        rows = pq.read_table(path)
        if not lacks_partitions(rows):
            continue
        dataset = rows.column("dataset")[0].as_py()
        filled = backfill_partitions(rows, partitions.rule_for(DatasetConfig(name=dataset)))
        wh.write("questions", conform("questions", filled), path.stem, partition={"dataset": dataset})
        rewritten.append(str(path))
    return rewritten
