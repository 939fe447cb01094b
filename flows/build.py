"""The `build` flow: ingest, index, expand search trees, value their nodes, export training data,
publish the report; ``build`` reads top to bottom, each stage a few lines below it.

Composition only: every stage is a task in ``tasks/*.py``, exchanging the warehouse root, source
names and question-id shards, never rows. The run records the dataset versions it ingested
(``runs.inputs``) and expands only their questions. Expansion shards run
``search.max_concurrent_shards`` at a time (``flows/runner.py``); a strategy whose valuation
failed is not exported; a shard that fails after its retries is in ``failed_shards`` and the
others go on. The run's state is written last (``flows/runs.py``), after the report and cards.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from ragfactory.flows.config import BuildConfig
from ragfactory.flows.runner import run_bounded, settle, shard_runner
from ragfactory.flows.runs import final_state, finish, opened_warehouse, recorded_run
from ragfactory.tasks.expand import expand_trees, plan_questions, result_storage, shard_written
from ragfactory.tasks.index import build_indexes
from ragfactory.tasks.ingest import backfill_question_partitions, ingest_corpus, ingest_dataset
from ragfactory.tasks.preflight import apply_network_policy, check_build
from ragfactory.tasks.report import publish_build_report
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.search.shard import shard_name
from ragfactory.tasks.training.registry import resolve_model_ref
from ragfactory.tasks.training_data import write_training_data
from ragfactory.tasks.valuate import value_nodes
from ragfactory.warehouse.catalog import refresh_catalog
from ragfactory.warehouse.store import Warehouse


@flow(name="build", log_prints=True)
def build(
    config: BuildConfig,
    run_id: str | None = None,
    policy_model: str | None = None,
    night: str | None = None,
    checked: bool = False,
) -> dict:
    """Ingest, index, expand, value and export as the config says; returns the run's summary.

    ``policy_model`` overrides the config's: 'embedded', a path, a registered model id,
    ``latest:<name>`` or ``promoted``. A frontier build is one run per ``night`` (default: today,
    UTC). The config is checked first (``tasks/preflight.py``) unless ``checked`` (the command
    line checks before Prefect starts): nothing is recorded for a missing file or model."""
    wh = opened_warehouse(config.warehouse.root)
    root = wh.location  # an object store's URI, so that every task and worker uploads to it
    apply_network_policy(config.allow_downloads)
    if not checked:
        check_build(config, wh, policy_model)
    ref = resolve_model_ref(wh, policy_model or config.llm.policy.model)
    if ref.registered_id is not None:
        get_run_logger().info("policy model %s is %s (%s)", ref.spec, ref.model_id, ref.load)
    config = config.with_policy_model(ref.configured)
    run_id = run_id or config.run_id(night)
    summary = {"run_id": run_id, "root": root, "catalog": str(wh.catalog_path), "warnings": config.warnings()}
    record = {"config": config.model_dump(mode="json"), "config_hash": config.config_hash()}
    with recorded_run(wh, run_id=run_id, flow="build", warnings=summary["warnings"], **record) as hold:
        errors: dict[str, str] = {}
        stages, datasets = _stages(root, run_id, config, hold, summary["warnings"], errors)
        refresh_catalog(wh)  # the run's state is written last: a failed report or card fails the run
        report = publish_build_report(root, run_id, config.name, datasets, stages["shards"])
        status = finish(hold, stages["failed_shards"], anything_done=bool(stages["ingested"]))
    return final_state({**summary, "status": status, **stages, "errors": errors, "report": report})


def _stages(root: str, run_id: str, config: BuildConfig, hold, warnings: list[str], errors: dict[str, str]):
    """Ingest, index, expand, value and export; returns the summary's stage results and the
    datasets expanded. The run's inputs and warnings are recorded as soon as they are known."""
    for warning in warnings:
        get_run_logger().warning(warning)
    ingested, ingest_failed = settle(_ingest(root, config), errors)  # every file at once
    ingested = [result for result, _ in ingested]
    warnings.extend(warning for r in ingested for warning in r["warnings"])
    hold.run.update(inputs=[{"dataset": r["source"], "version": r["version"]} for r in ingested], warnings=warnings)
    hold.record("running")  # the row names its inputs now: the dataset cards read them before the run ends
    datasets, sources, indexes = _prepare_search(root, config, ingested)
    shards, expand_failed = _expand(root, run_id, config, datasets, sources, [r["version"] for r in ingested], errors)
    valuations, value_failed = settle(_value(root, run_id, config, shards), errors)
    unvalued = {s["strategy"] for s in shards if f"value-{s['shard']}" in value_failed}
    exports = [
        write_training_data(root, run_id, config.tree_name(s), config.export, config.seed, config.llm)
        for s in config.search.strategies
        if s not in unvalued  # its exports would read nodes without values
    ]
    valuations, failed = [r for r, _ in valuations], ingest_failed + expand_failed + value_failed
    stages = dict(ingested=ingested, indexes=indexes, shards=shards, valuations=valuations, exports=exports)
    return {**stages, "failed_shards": failed}, datasets


def _ingest(root: str, config: BuildConfig) -> list:
    """Every dataset file and corpus file submitted, named (a dataset of several files by its
    name and path)."""
    limit, names = config.corpus.max_passage_chars, [d.name for d in config.datasets]
    named = lambda d: d.name if names.count(d.name) == 1 else f"{d.name} ({d.path})"  # noqa: E731
    datasets = [
        (named(d), ingest_dataset.submit(root, d, config.partitions.rule_for(d), limit)) for d in config.datasets
    ]
    return datasets + [(path, ingest_corpus.submit(root, path, limit)) for path in config.corpus.files]


def _prepare_search(root: str, config: BuildConfig, ingested: list[dict]) -> tuple[list[str], list[str], dict]:
    """Partitions backfilled in questions shards written before them, and an index per passage
    source; returns (the datasets with questions, the passage sources, their indexes)."""
    if backfilled := backfill_question_partitions(root, config.partitions):
        get_run_logger().info("partitions backfilled in questions shards written before them: %s", backfilled)
    searched = {r["source"] for r in ingested if r["passages"]}
    if not config.corpus.from_datasets:  # the datasets' own paragraphs are searched only if asked
        searched -= {d.name for d in config.datasets}
    sources = sorted(searched)
    indexes = build_indexes(root, sources, config.retrieval) if sources else {}
    return sorted({r["source"] for r in ingested if r["questions"]}), sources, indexes


def _expand(root, run_id, config: BuildConfig, datasets, sources, versions, errors) -> tuple[list[dict], list[str]]:
    """Every strategy's shards expanded; a shard whose inputs are unchanged since an earlier run
    is a cache hit (marked ``cached``), one whose rows are gone runs again."""
    wh, search = Warehouse(root), config.search
    storage, datasets = result_storage(wh), search.datasets or datasets
    policy = (config.llm.policy.backend, config.llm.policy.model)  # the frontier counts the engine too
    jobs = [
        (strategy, shard_name(strategy, index), ids)
        for strategy in search.strategies
        for index, ids in enumerate(
            plan_questions(root, run_id, search, strategy, config.tree_name(strategy), policy, datasets, versions)
        )
    ]

    def submit(job, run_task):
        strategy, shard, ids = job
        expand = expand_trees.with_options(result_storage=storage, refresh_cache=not shard_written(wh, run_id, shard))
        parameters = {"root": root, "run_id": run_id, "config": config, "strategy": strategy, "shard": shard}
        return run_task(expand, {**parameters, "question_ids": ids, "sources": sources})

    with shard_runner(config.runner, search.max_concurrent_shards) as (run_task, limit):
        futures = run_bounded(jobs, lambda job: submit(job, run_task), limit)
        # settled inside the block: a Dask future's state lives in its cluster, closed after it
        done, failed = settle(((shard, future) for (_, shard, _), future in futures), errors)
    return [{**result, "cached": state.name == "Cached"} for result, state in done], failed


def _value(root: str, run_id: str, config: BuildConfig, shards: list[dict]):
    """The valuation of each expanded shard whose strategy the ``valuation`` section values,
    named ``value-<shard>``, as many at once as expansion ran."""
    valued = {s: config.valuation.values(s, STRATEGIES.get(s).valued) for s in config.search.strategies}
    jobs = [s for s in shards if valued[s["strategy"]]]
    submit = lambda s: value_nodes.submit(root, run_id, s["shard"], config.valuation)  # noqa: E731
    futures = run_bounded(jobs, submit, config.search.max_concurrent_shards)
    return ((f"value-{s['shard']}", future) for s, future in futures)
