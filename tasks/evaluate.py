"""Prefect tasks for the evaluate stage: questions -> a model's answers -> ``evals``, ``llm_calls``.

``plan_evaluation`` resolves the model (registry id, path or ``embedded``), names the eval run
and lists the bundled datasets the warehouse still lacks (the flow ingests them first).
``evaluate_dataset`` answers the first ``limit`` questions of one dataset's partition (test by
default) in every mode through one batcher over the model, searching the dataset's own passages
by default, and writes one shard per mode of ``evals`` and of ``llm_calls`` (the calls that mode
used), marking the questions the model trained on (``is_seen``), so a rerun of a mode
replaces exactly its rows and finds its completions in the call cache. ``report_evaluation``
publishes the per-dataset aggregates as a table artifact; ``compare_evaluations`` pairs two
models' runs question by question into ``eval_compare`` (``tasks/eval/compare.py``).
"""

from __future__ import annotations

import asyncio

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NONE

from ragfactory.flows.config import EvalConfig
from ragfactory.tasks.data.loaders import bundled_names
from ragfactory.tasks.eval.compare import CompareConfig, compare_rows, compare_run_id
from ragfactory.tasks.eval.inference import EvalQuestion, Outcome
from ragfactory.tasks.eval.runner import (
    aggregate,
    answer_questions,
    calls_of,
    eval_hash,
    eval_rows,
    needs_retriever,
    shard_of,
)
from ragfactory.tasks.llm.cache import CallCache, utc_now
from ragfactory.tasks.llm.config import LLMConfig
from ragfactory.tasks.llm.engine import make_batcher
from ragfactory.tasks.retrieval.corpus import WarehousePassages
from ragfactory.tasks.retrieval.ledger import LedgerRetriever, ledgered
from ragfactory.tasks.retry import retry_unless_permanent
from ragfactory.tasks.training.registry import resolve_model_ref, seen_question_ids
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.sql_files import sql_file
from ragfactory.warehouse.store import Warehouse

QUESTIONS_SQL = sql_file("ragfactory.tasks", "eval_questions")


def read_eval_questions(wh: Warehouse, dataset: str, limit: int | None, partition: str = "test") -> list[EvalQuestion]:
    """The first ``limit`` questions of the dataset's ``partition``, in sample-key (hash) order."""
    params = {"dataset": dataset, "limit": limit, "partition": partition}
    return [EvalQuestion.from_row(row) for row in query(wh, QUESTIONS_SQL, params).to_pylist()]


def engine_config(config: EvalConfig, model_ref: str) -> LLMConfig:
    """The config's engine settings with the evaluated model as the policy (and judge)."""
    policy = config.llm.policy.model_copy(update={"model": model_ref})
    return config.llm.model_copy(update={"policy": policy, "judge": None})


def open_eval_retriever(wh: Warehouse, config: EvalConfig, dataset: str, run_id: str) -> LedgerRetriever:
    """The configured retriever over the config's sources (by default the dataset's passages),
    in the retrieval ledger as strategy ``eval``: every search is a ``retrievals`` row of the
    run, and a query any earlier run asked of the same index is answered from its row."""
    sources = config.sources or [dataset]
    passages = None
    if not config.retrieval.server_url:
        passages = WarehousePassages(wh, sources)
        if not passages.count():
            raise ValueError(
                f"no passages from sources {sources} in {wh.root}: set `sources` to the "
                "corpus the questions should search"
            )
    return ledgered(wh, sources, passages, config.retrieval, run_id, "eval", shard_of(dataset, "search"))


def write_eval_shards(
    wh: Warehouse,
    plan: dict,
    dataset: str,
    questions: list[EvalQuestion],
    outcomes: dict[str, list[Outcome]],
    cache: CallCache,
) -> list[dict]:
    """Write each mode's ``evals`` and ``llm_calls`` shards; returns every ``evals`` row."""
    run_id, created_at, written = plan["run_id"], utc_now(), []
    seen = seen_question_ids(wh, plan["model_id"])
    for mode, mode_outcomes in outcomes.items():
        rows = eval_rows(
            run_id, plan["model_id"], dataset, mode, questions, mode_outcomes, created_at, plan["partition"], seen
        )
        shard = shard_of(dataset, mode)
        wh.write("evals", rows, shard, partition={"run_id": run_id})
        wh.write("llm_calls", calls_of(rows, cache.rows()), shard, partition={"run_id": run_id})
        written.extend(rows)
    return written


@task(task_run_name="plan-evaluation", cache_policy=NONE)
def plan_evaluation(root: str, config: EvalConfig) -> dict:
    """The model (id and what to load), the eval run id, and the datasets to ingest first."""
    wh = Warehouse(root)
    model = resolve_model_ref(wh, config.model)
    present = set(query(wh, "select distinct dataset from questions").column("dataset").to_pylist())
    missing = [name for name in config.datasets if name not in present]
    unknown = sorted(set(missing) - set(bundled_names()))
    if unknown:
        raise ValueError(
            f"no questions of {unknown} in {wh.root}: build them first (ragfactory build); "
            f"bundled datasets are ingested on demand: {sorted(bundled_names())}"
        )
    # the partition is part of the run: an evaluation on valid never replaces one on test
    config_hash = eval_hash(model.model_id, config.answer_fields() | {"partition": config.partition})
    return {
        "model_id": model.model_id,
        "model_ref": model.load,
        "model_source": model.source,
        "config_hash": config_hash,
        "run_id": f"eval-{config_hash}",
        "ingest": missing,
        "partition": config.partition,
    }


@task(
    retries=2,
    retry_delay_seconds=[5, 30],
    retry_condition_fn=retry_unless_permanent,
    task_run_name="evaluate-{dataset}",
    cache_policy=NONE,
)
def evaluate_dataset(root: str, config: EvalConfig, plan: dict, dataset: str) -> dict:
    """Answer one dataset's questions in every mode; write its evals and llm_calls shards."""
    wh = Warehouse(root)
    questions = read_eval_questions(wh, dataset, config.limit, config.partition)
    retriever = open_eval_retriever(wh, config, dataset, plan["run_id"]) if needs_retriever(config.modes) else None
    cache = CallCache.from_warehouse(wh, plan["run_id"])
    batcher = make_batcher(engine_config(config, plan["model_ref"]), cache, wh.artifacts_dir("models"))
    outcomes = asyncio.run(
        answer_questions(
            questions,
            config.modes,
            batcher,
            retriever,
            config.inference(),
            config.llm.max_in_flight,
        )
    )
    rows = write_eval_shards(wh, plan, dataset, questions, outcomes, cache)
    if retriever is not None:
        wh.write("retrievals", retriever.rows(), shard_of(dataset, "search"), partition={"run_id": plan["run_id"]})
    stats = batcher.stats.as_dict()
    get_run_logger().info(
        "%s: %d %s questions x %d modes, engine %s", dataset, len(questions), config.partition, len(config.modes), stats
    )
    n_seen = len({row["question_id"] for row in rows if row["is_seen"]})
    return {
        "dataset": dataset,
        "questions": len(questions),
        "engine": stats,
        "aggregates": aggregate(rows),
        "n_seen": n_seen,
    }


def evaluation_warnings(config: EvalConfig, model_id: str, results: list[dict]) -> list[str]:
    """What a reader of the figures must know: questions the model trained on, the train
    partition (what builds expand) evaluated, a dataset with no question to answer."""
    warnings = []
    if config.partition == "train":
        warnings.append("evaluated on the train partition, which builds expand: these are not held-out figures")
    for result in results:
        if not result["questions"]:
            warnings.append(
                f"{result['dataset']}: no {config.partition} questions in the warehouse "
                "(was it ingested with a small limit?)"
            )
        if result["n_seen"]:
            warnings.append(
                f"{result['dataset']}: {result['n_seen']} of {result['questions']} "
                f"{config.partition} questions were in the training data of {model_id} "
                "(evals.is_seen)"
            )
    return warnings


@task(task_run_name="report-{run_id}", cache_policy=NONE)
def report_evaluation(run_id: str, model_id: str, aggregates: list[dict]) -> None:
    """A table artifact of the run's aggregates: one row per dataset and mode."""
    create_table_artifact(
        aggregates, key=run_id, description=f"evaluation of {model_id}: mean EM / F1 / cover-EM per dataset and mode"
    )


COMPARED_SQL = sql_file("ragfactory.tasks", "eval_compared")


@task(task_run_name="compare-{run_a}-{run_b}", cache_policy=NONE)
def compare_evaluations(root: str, config: EvalConfig, run_a: str, run_b: str) -> list[dict]:
    """The ``eval_compare`` rows of model a's run against model b's, over the config's datasets
    and modes (one shard per pair of runs); returns them."""
    wh = Warehouse(root)
    params = {"datasets": list(config.datasets), "modes": list(config.modes)}
    a, b = (query(wh, COMPARED_SQL, params | {"run_id": run}).to_pylist() for run in (run_a, run_b))
    rows = compare_rows(a, b, CompareConfig(seed=config.seed), utc_now())
    wh.write("eval_compare", rows, "compare", partition={"run_id": compare_run_id(run_a, run_b)})
    return rows
