"""Prefect tasks for the expand stage: questions -> search trees (nodes, rollouts, plans,
plan_scores, llm_calls, retrievals).

``plan_shards`` picks the questions and cuts them into shards; ``expand_trees`` runs one
shard through one strategy with the policy engine, the retriever and the call cache, and writes
that shard's rows of each table. A shard is the unit of retries: a rerun replaces its files.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path

from prefect import get_run_logger, task
from prefect.context import TaskRunContext

from ragfactory.flows.config import BuildConfig
from ragfactory.schemas.tables import SCHEMA_VERSION
from ragfactory.tasks.attribution import write_ledgers
from ragfactory.tasks.llm.cache import CallCache
from ragfactory.tasks.llm.engine import make_batcher
from ragfactory.tasks.retrieval.ledger import open_ledger
from ragfactory.tasks.retry import retry_unless_permanent
from ragfactory.tasks.search.config import SearchConfig
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.search.shard import expand_shard, split_shards
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.integrity import is_intact, read_entry
from ragfactory.warehouse.sql_files import sql_file
from ragfactory.warehouse.store import Warehouse

QUESTIONS_SQL = sql_file("ragfactory.tasks", "expand_questions")


@task(task_run_name="plan-shards")
def plan_shards(
    root: str,
    datasets: list[str],
    per_dataset: int | None,
    shard_size: int,
    partition: str = "train",
    question_ids: list[str] | None = None,
    versions: list[str] | None = None,
) -> list[list[str]]:
    """The question ids to expand (the first ``per_dataset`` of each dataset's ``partition`` in
    sample-key order, or ``question_ids`` as listed), cut into shards of ``shard_size``.

    ``versions`` (``ingests.version``, those the build ingested) confine a dataset to the
    questions its version produced: the ``questions`` table holds every question any run
    ingested, and a limit-3 build must expand its 3. A dataset without a listed version (named
    in ``search.datasets`` but not ingested by this build) offers all its questions.
    """
    if question_ids is not None:
        return split_shards(checked_question_ids(Warehouse(root), question_ids, partition), shard_size)
    params = {
        "datasets": datasets,
        "per_dataset": per_dataset,
        "partition": partition,
        "versions": list(versions or []),
    }
    rows = query(Warehouse(root), QUESTIONS_SQL, params)
    return split_shards(rows.column("question_id").to_pylist(), shard_size)


FRONTIER_SQL = sql_file("ragfactory.tasks", "expand_frontier")


@task(task_run_name="plan-frontier-{strategy}")
def plan_frontier(
    root: str,
    run_id: str,
    strategy: str,
    policy: tuple[str, str],
    datasets: list[str],
    n: int,
    shard_size: int,
    partition: str = "train",
    versions: list[str] | None = None,
) -> list[list[str]]:
    """The next ``n`` questions of ``partition`` in sample-key order that no other run expanded
    with tree strategy ``strategy`` (``nodes.strategy``) and policy ``policy`` (its engine and
    model together: the null engine's model names only a tokenizer, so a dry run on it is no run
    of the real engine), cut into shards: each night extends the last. Run ``run_id`` itself is
    not counted, so a night that resumes plans the questions it planned before."""
    backend, model = policy
    params = {
        "datasets": datasets,
        "n": n,
        "partition": partition,
        "versions": list(versions or []),
        "strategy": strategy,
        "backend": backend,
        "model": model,
        "run_id": run_id,
    }
    rows = query(Warehouse(root), FRONTIER_SQL, params)
    return split_shards(rows.column("question_id").to_pylist(), shard_size)


def plan_questions(
    root: str, run_id: str, search: SearchConfig, strategy: str, tree: str, policy: tuple[str, str], datasets, versions
) -> list[list[str]]:
    """The shards of questions ``strategy`` (writing tree ``tree``) expands: the frontier
    (``search.select``), or the sample or listed questions."""
    s = search
    if s.select == "frontier":
        n, size = s.questions_per_night, s.shard_size
        return plan_frontier(root, run_id, tree, policy, datasets, n, size, s.partition, versions)
    listed = s.listed_questions(strategy)
    return plan_shards(root, datasets, s.questions_per_dataset, s.shard_size, s.partition, listed, versions)


def checked_question_ids(wh: Warehouse, question_ids: list[str], partition: str) -> list[str]:
    """``question_ids`` as given, once each is known to be ingested and in ``partition``."""
    rows = query(
        wh, "select question_id, partition from questions where list_contains($ids, question_id)", {"ids": question_ids}
    ).to_pylist()
    found = {row["question_id"]: row["partition"] for row in rows}
    missing = [q for q in question_ids if q not in found]
    if missing:
        raise ValueError(f"search.question_ids: not in the warehouse's questions: {missing}")
    outside = [f"{q} ({found[q]})" for q in question_ids if found[q] != partition]
    if outside:
        raise ValueError(
            f"search.question_ids: not in the {partition!r} partition the build expands: "
            f"{outside}; pick {partition} questions or set search.partition"
        )
    return list(dict.fromkeys(question_ids))


def read_questions(wh: Warehouse, question_ids: list[str]) -> list[dict]:
    rows = query(wh, "select * from questions where list_contains($ids, question_id)", {"ids": question_ids})
    by_id = {row["question_id"]: row for row in rows.to_pylist()}
    return [by_id[q] for q in question_ids if q in by_id]


RESULT_STORAGE_ENV = "RAGFACTORY_RESULT_STORAGE"


def shard_cache_key(context: TaskRunContext | None, parameters: dict) -> str:
    """The cross-run cache key of one expansion shard: (config hash, run, strategy, shard).

    The questions, passage sources and the warehouse root are in it too, and the schema version,
    so changed inputs or a changed table layout miss the cache. The config hash covers the
    resolved policy model: a new model is a new key.
    """
    config: BuildConfig = parameters["config"]
    payload = json.dumps(
        {
            "config": config.config_hash(),
            "run_id": parameters["run_id"],
            "strategy": parameters["strategy"],
            "shard": parameters["shard"],
            "questions": list(parameters["question_ids"]),
            "sources": sorted(parameters["sources"]),
            "root": Warehouse(parameters["root"]).location,
            "schema": SCHEMA_VERSION,
        },
        sort_keys=True,
    )
    return "expand-" + hashlib.sha256(payload.encode()).hexdigest()[:32]


def result_storage(wh: Warehouse):
    """Where shard results persist: ``$RAGFACTORY_RESULT_STORAGE`` (a folder, or a Prefect
    storage block slug such as ``s3-bucket/ragfactory`` that several workers share), else beside
    the warehouse's data: ``_results/`` in its object store (so a rerun on any machine finds
    the shards any machine finished), or a folder under a local root's artifacts."""
    configured = os.environ.get(RESULT_STORAGE_ENV, "").strip()
    if not configured:
        if wh.store is not None:  # a block saved on the build's Prefect server, which workers resolve
            from prefect.filesystems import RemoteFileSystem

            name = "ragfactory-results-" + hashlib.sha256(wh.location.encode()).hexdigest()[:16]
            RemoteFileSystem(basepath=f"{wh.location}/_results").save(name, overwrite=True)
            return f"remote-file-system/{name}"
        return wh.artifacts_dir("prefect-results")
    if configured.startswith(("/", "~", ".")):
        return Path(configured).expanduser()
    return configured


SHARD_TABLES = ("nodes", "rollouts", "plans", "plan_scores", "rewards", "llm_calls", "retrievals")
# tables a shard may have no file of and still be whole: it was written before they existed
MAY_LACK = ("rewards", "retrievals")


def shard_written(wh: Warehouse, run_id: str, shard: str) -> bool:
    """Whether a shard's rows are in the warehouse as ``expand_trees`` wrote them (a cached
    result without them is useless): each of its files exists and matches its manifest entry
    (size and content hash). A file rewritten, truncated or put there by hand runs the shard again.
    """
    paths = {table: wh.shard_path(table, {"run_id": run_id}, shard) for table in SHARD_TABLES}
    # A file of a MAY_LACK table may be absent; one the manifest records (a quarantined file)
    # must be there.
    return all(
        is_intact(wh.root, path)
        for table, path in paths.items()
        if table not in MAY_LACK or path.exists() or read_entry(wh.root, path) is not None
    )


@task(
    retries=2,
    retry_delay_seconds=[5, 30],
    retry_condition_fn=retry_unless_permanent,
    task_run_name="expand-{shard}",
    cache_key_fn=shard_cache_key,
    persist_result=True,
)
def expand_trees(
    root: str,
    run_id: str,
    config: BuildConfig,
    strategy: str,
    shard: str,
    question_ids: list[str],
    sources: list[str],
) -> dict:
    """Expand one shard of questions with the registered ``strategy`` and write its shard of every
    table the strategy fills (nodes, rollouts, plans, plan_scores, rewards) and of llm_calls."""
    wh = Warehouse(root)
    retriever = open_ledger(wh, sources, config.retrieval, run_id, strategy, shard)
    cache = CallCache.from_warehouse(wh, run_id)
    batcher = make_batcher(config.llm, cache, wh.artifacts_dir("models"))
    plugin = STRATEGIES.get(strategy)
    settings = plugin.settings(config.search)
    scorer = plugin.open_scorer(settings, wh.artifacts_dir("embeddings")) if plugin.open_scorer else None
    questions = read_questions(wh, question_ids)
    rows = asyncio.run(
        expand_shard(
            plugin,
            questions,
            batcher,
            retriever,
            settings,
            run_id,
            config.seed,
            config.llm.max_in_flight,
            scorer,
        )
    )
    write_ledgers(wh, shard, strategy, rows.tables(), cache, retriever, settings, questions)
    for table, table_rows in rows.tables().items():
        wh.write(table, table_rows, shard, partition={"run_id": run_id})
    cache.write(wh, shard)
    return _shard_figures(shard, strategy, len(question_ids), rows, batcher.stats.as_dict())


def _shard_figures(shard: str, strategy: str, n_questions: int, rows, engine: dict) -> dict:
    """What one expanded shard did, logged and returned as the task's result."""
    get_run_logger().info("%s: %d questions, %d nodes, engine %s", shard, n_questions, len(rows.nodes), engine)
    return {
        "shard": shard,
        "strategy": strategy,
        "questions": n_questions,
        "nodes": len(rows.nodes),
        "rollouts": len(rows.rollouts),
        "engine": engine,
    }
