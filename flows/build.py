"""The `build` flow: ingest, index, expand search trees, value their nodes, export training data,
refresh the catalog.

Composition only: every stage is a task in ``tasks/*.py``; tasks exchange the warehouse root,
source names and question-id shards, never rows. A shard (a dataset file, or a slice of
questions for one strategy) that still fails after its retries is recorded in the run's
``failed_shards`` and the other shards go on. Ingest only adds to the input tables; the run
records the versions it ingested (``runs.inputs``) and expands only their questions, so builds
with different configs into one root, even at the same time, leave each other's inputs intact. Expansion shards of every strategy run at once,
``search.max_concurrent_shards`` at a time: they share the worker's engine, whose scheduler puts
the requests of different shards in the same engine calls (``tasks/llm/scheduler.py``); with ``runner.kind: dask``
they run on a Dask cluster's workers instead (``flows/runner.py``). Once they are done, the
valuation stage (``tasks/valuate.py``) values the nodes of each expanded shard of the strategies
(``search.max_concurrent_shards`` at a time) the ``valuation`` section names (default: those whose plug-in asks for values), and only then
does the export read them; a strategy whose valuation failed is not exported.

The flow holds its run (``warehouse/runs.py``): the row says ``running`` only while this process
lives, ``interrupted`` or ``failed`` when the flow is cut short. A run with failed shards ends in
a Failed Prefect state named ``Partial`` (or ``Failed``) that still carries the summary
(``state.result(raise_on_failure=False)``), so Prefect's UI and automations never show it as
Completed.
"""

from __future__ import annotations

import datetime as dt
import time

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture

from ragfactory.flows.config import BuildConfig
from ragfactory.flows.runner import settled_state, shard_runner
from ragfactory.flows.runs import final_state, finish, opened_warehouse, recorded_run
from ragfactory.tasks.expand import expand_trees, plan_frontier, plan_shards, result_storage, shard_written
from ragfactory.tasks.index import build_indexes
from ragfactory.tasks.ingest import backfill_question_partitions, ingest_corpus, ingest_dataset
from ragfactory.tasks.preflight import apply_network_policy, check_build
from ragfactory.tasks.report import publish_build_report
from ragfactory.tasks.retry import failure_reason
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.search.shard import shard_name
from ragfactory.tasks.training.registry import resolve_model_ref
from ragfactory.tasks.training_data import write_training_data
from ragfactory.tasks.valuate import value_nodes
from ragfactory.warehouse.catalog import refresh_catalog
from ragfactory.warehouse.runs import default_run_id
from ragfactory.warehouse.store import Warehouse, safe_name


def _settle(futures: dict[str, PrefectFuture], errors: dict[str, str]) -> tuple[list[dict], list[str]]:
    """Results of the shards that completed, and the names of those that failed (their reasons
    go to ``errors``)."""
    done, failed = [], []
    for name, future in futures.items():
        future.wait()
        if future.state.is_completed():
            done.append(future.result())
        else:
            failed.append(name)
            errors[name] = failure_reason(name, future.state)
    return done, failed


def _expand(
    root: str,
    run_id: str,
    config: BuildConfig,
    datasets: list[str],
    sources: list[str],
    versions: list[str],
    errors: dict[str, str],
) -> tuple[list[dict], list[str]]:
    """Expand every configured strategy; returns (shard results, failed shards), the reason of
    each failure in ``errors``.

    A shard whose inputs are unchanged since an earlier run is a cache hit (its rows are already
    in the warehouse) and does no work; a shard whose rows are gone runs again. A dataset this
    build ingested contributes only the questions of its ``versions``.
    """
    search, wh = config.search, Warehouse(root)
    storage = result_storage(wh)
    planned = [
        (strategy, shard_name(strategy, index), ids)
        for strategy in search.strategies
        for index, ids in enumerate(_questions(root, run_id, config, strategy, search.datasets or datasets, versions))
    ]
    with shard_runner(config.runner, search.max_concurrent_shards) as (run_task, limit):
        submit = _shard_submitter(run_task, wh, storage, root, run_id, config, sources)
        # settled inside the block: a Dask future's state lives in its cluster, closed after it
        return _settle_expansions(_bounded(submit, planned, limit or len(planned) or 1), errors)


def _shard_submitter(run_task, wh: Warehouse, storage, root: str, run_id: str, config: BuildConfig, sources: list[str]):
    """Submits one planned shard's ``expand_trees`` through the runner, its result persisted in
    ``storage``; a shard whose rows are gone from the warehouse refreshes its cache entry, so it
    runs again."""

    def submit(job: tuple[str, str, list[str]]) -> PrefectFuture:
        strategy, name, ids = job
        expand = expand_trees.with_options(result_storage=storage, refresh_cache=not shard_written(wh, run_id, name))
        return run_task(
            expand,
            {
                "root": root,
                "run_id": run_id,
                "config": config,
                "strategy": strategy,
                "shard": name,
                "question_ids": ids,
                "sources": sources,
            },
        )

    return submit


def _settle_expansions(
    finished: list[tuple[tuple[str, str, list[str]], PrefectFuture]], errors: dict[str, str]
) -> tuple[list[dict], list[str]]:
    """Each expanded shard's result, marked ``cached`` when it was a cache hit, and the names of
    the shards that failed (their reasons go to ``errors``)."""
    shards, failed = [], []
    for (_, name, _), future in finished:
        state = settled_state(future)
        if state.is_completed():
            shards.append({**future.result(), "cached": state.name == "Cached"})
        else:
            failed.append(name)
            errors[name] = failure_reason(name, state)
    return shards, failed


def _questions(
    root: str, run_id: str, config: BuildConfig, strategy: str, datasets: list[str], versions: list[str]
) -> list[list[str]]:
    """The shards of questions ``strategy`` expands: the frontier (``search.select``), or the
    sample or listed questions."""
    search = config.search
    if search.select == "frontier":
        return plan_frontier(
            root,
            run_id,
            tree_strategy(config, strategy),
            (config.llm.policy.backend, config.llm.policy.model),
            datasets,
            search.questions_per_night,
            search.shard_size,
            search.partition,
            versions,
        )
    return plan_shards(
        root,
        datasets,
        search.questions_per_dataset,
        search.shard_size,
        search.partition,
        search.listed_questions(strategy),
        versions,
    )


def _value(
    root: str, run_id: str, config: BuildConfig, shards: list[dict], errors: dict[str, str]
) -> tuple[list[dict], list[str], set[str]]:
    """Value the ``nodes`` of every expanded shard whose strategy the ``valuation`` section
    values; returns (the valuations done, those that failed, named ``value-<shard>``, and the
    strategies of the failed ones)."""
    valued = {s: config.valuation.values(s, STRATEGIES.get(s).valued) for s in config.search.strategies}
    jobs = [r for r in shards if valued[r["strategy"]]]
    # as many at once as expansion ran, not every shard of the build (each reads its shard's nodes)
    finished = _bounded(
        lambda r: value_nodes.submit(root, run_id, r["shard"], config.valuation),
        jobs,
        config.search.max_concurrent_shards,
    )
    done, failed = _settle({f"value-{r['shard']}": future for r, future in finished}, errors)
    by_name = {f"value-{r['shard']}": r["strategy"] for r in shards}
    return done, failed, {by_name[name] for name in failed}


def _export(root: str, run_id: str, config: BuildConfig, unvalued: set[str]) -> list[dict]:
    """Export every configured strategy but those whose valuation failed (their exports would
    read nodes without values)."""
    return [
        write_training_data(root, run_id, tree_strategy(config, strategy), config.export, config.seed, config.llm)
        for strategy in config.search.strategies
        if strategy not in unvalued
    ]


def _ingest(root: str, config: BuildConfig, errors: dict[str, str]) -> tuple[list[dict], list[str]]:
    """Ingest every dataset and corpus file at once: (their summaries, the names that failed);
    the reason of each failure goes to ``errors``."""
    limit = config.corpus.max_passage_chars
    names = [d.name for d in config.datasets]  # a dataset of several files: one entry a file
    futures = {
        d.name if names.count(d.name) == 1 else f"{d.name} ({d.path})": ingest_dataset.submit(
            root, d, config.partitions.rule_for(d), limit
        )
        for d in config.datasets
    }
    futures |= {f: ingest_corpus.submit(root, f, limit) for f in config.corpus.files}
    return _settle(futures, errors)


def _prepare_search(root: str, config: BuildConfig, ingested: list[dict]) -> tuple[list[str], list[str], dict]:
    """Make what was ingested ready to expand: partitions backfilled in questions shards written
    before them, and an index per passage source; returns (the datasets with questions, the
    passage sources, their indexes)."""
    if backfilled := backfill_question_partitions(root, config.partitions):
        get_run_logger().info("partitions backfilled in questions shards written before them: %s", backfilled)
    # the datasets' own paragraphs are searched only when corpus.from_datasets says so
    searched = {r["source"] for r in ingested if r["passages"]}
    if not config.corpus.from_datasets:
        searched -= {d.name for d in config.datasets}
    sources = sorted(searched)
    indexes = build_indexes(root, sources, config.retrieval) if sources else {}
    datasets = sorted({r["source"] for r in ingested if r["questions"]})
    return datasets, sources, indexes


def _bounded(submit, jobs: list, limit: int, poll_s: float = 0.2) -> list[tuple[object, PrefectFuture]]:
    """(job, finished future) for every job, ``limit`` submitted at a time, in job order."""
    running: list[tuple[object, PrefectFuture]] = []
    finished: dict[int, tuple[object, PrefectFuture]] = {}
    queue = list(enumerate(jobs))
    while queue or running:
        while queue and len(running) < limit:
            index, job = queue.pop(0)
            running.append((index, (job, submit(job))))
        done = {i for i, item in running if _finished(item[1])}
        finished.update((i, item) for i, item in running if i in done)
        running = [(i, item) for i, item in running if i not in done]
        if running:
            time.sleep(poll_s)
    return [finished[i] for i in sorted(finished)]


def _finished(future: PrefectFuture) -> bool:
    """Whether a submitted shard has finished, asked of its runner's own future (a thread's or a
    Dask cluster's) rather than of the Prefect API: no request per poll, and no dependence on
    which server this process's state reports reach."""
    wrapped = getattr(future, "wrapped_future", None)
    if wrapped is not None and callable(getattr(wrapped, "done", None)):
        return bool(wrapped.done())
    return future.state.is_final()


def tree_strategy(config: BuildConfig, strategy: str) -> str:
    """The ``nodes.strategy`` a configured strategy writes (DecEx-RAG without pruning writes its own)."""
    plugin = STRATEGIES.get(strategy)
    return plugin.tree_name(plugin.settings(config.search))


def with_policy_model(config: BuildConfig, wh: Warehouse, policy_model: str | None) -> BuildConfig:
    """The config with its policy model resolved: ``latest:<name>`` (the newest trained model of
    that lineage) or a registered model id becomes the weights' folder, so the config hash, the
    run id and the shard cache keys change when a new model lands."""
    spec = policy_model or config.llm.policy.model
    ref = resolve_model_ref(wh, spec)
    if ref.registered_id is None:
        # a folder or a name is loaded as written, so its config hash is the one it always had
        return config if spec == config.llm.policy.model else _with_policy(config, spec)
    get_run_logger().info("policy model %s is %s (%s)", spec, ref.model_id, ref.load)
    return _with_policy(config, ref.load)


def _with_policy(config: BuildConfig, model: str) -> BuildConfig:
    policy = config.llm.policy.model_copy(update={"model": model})
    return config.model_copy(update={"llm": config.llm.model_copy(update={"policy": policy})})


def night_run_id(config: BuildConfig, night: str | None = None) -> str:
    """The run id of a build: its name and config hash, and for a frontier build the night
    too (the same config picks new questions each night, so it is a new run)."""
    run_id = default_run_id(config.name, config.config_hash())
    if config.search.select != "frontier":
        return run_id
    return safe_name(f"{run_id}-{night or dt.datetime.now(dt.UTC).date().isoformat()}")


def build_warnings(config: BuildConfig) -> list[str]:
    """What a reader of this build's exports must know: it draws on held-out questions."""
    if config.search.partition == "train" or not config.search.strategies:
        return []
    return [
        f"search.partition is {config.search.partition!r}: this build expands questions that "
        "evaluations hold out; a model trained on it is scored on questions it has seen "
        "(evals.is_seen) unless evaluated on another partition"
    ]


@flow(name="build", log_prints=True)
def build(
    config: BuildConfig, run_id: str | None = None, policy_model: str | None = None, night: str | None = None
) -> dict:
    """Ingest, index, expand and export as the config says; returns a summary of the run.

    ``policy_model`` overrides the config's policy model: 'embedded', a path, a registered model
    id, ``latest:<name>`` or ``promoted``. A frontier build (``search.select: frontier``) is one
    run per ``night`` (default: today's UTC date), so each night keeps its own runs row. The whole config is checked first (``tasks/preflight.py``): a
    missing input file or a model not on this machine fails before any run is recorded.
    """
    wh, root, config, run_id = _opened(config, run_id, policy_model, night)
    warnings = build_warnings(config)
    with recorded_run(
        wh,
        run_id=run_id,
        flow="build",
        config=config.model_dump(mode="json"),
        config_hash=config.config_hash(),
        warnings=warnings,
    ) as hold:
        errors: dict[str, str] = {}
        stages, datasets = _run_stages(root, run_id, config, hold, warnings, errors)
        # the run's state is written last: a report or card that fails records the run failed
        refresh_catalog(wh)
        report = publish_build_report(root, run_id, config.name, datasets, stages["shards"])
        status = finish(hold, stages["failed_shards"], anything_done=bool(stages["ingested"]))
    return final_state(
        {
            "run_id": run_id,
            "root": root,
            "catalog": str(wh.catalog_path),
            "status": status,
            **stages,
            "errors": errors,
            "warnings": warnings,
            "report": report,
        }
    )


def _opened(
    config: BuildConfig, run_id: str | None, policy_model: str | None, night: str | None
) -> tuple[Warehouse, str, BuildConfig, str]:
    """The warehouse, its location, the config with its policy model resolved and the run id,
    once the whole config passes its checks."""
    wh = opened_warehouse(config.warehouse.root)
    root = wh.location  # an object store's URI, so that every task and worker uploads to it
    apply_network_policy(config.allow_downloads)
    check_build(config, wh, policy_model)
    config = with_policy_model(config, wh, policy_model)
    return wh, root, config, run_id or night_run_id(config, night)


def _run_stages(
    root: str, run_id: str, config: BuildConfig, hold, warnings: list[str], errors: dict[str, str]
) -> tuple[dict, list[str]]:
    """Ingest, prepare, expand, value and export, the inputs and warnings recorded on the held
    run as they come; returns the summary's stage results and the datasets expanded."""
    get_run_logger().info("run %s writing to %s", run_id, root)
    for warning in warnings:
        get_run_logger().warning(warning)
    ingested, failed = _ingest(root, config, errors)
    warnings.extend(warning for r in ingested for warning in r["warnings"])  # the summary's list too
    hold.run.update(inputs=[{"dataset": r["source"], "version": r["version"]} for r in ingested], warnings=warnings)
    hold.record("running")  # the row names its inputs now: the dataset cards read them before the run ends
    datasets, sources, indexes = _prepare_search(root, config, ingested)
    shards, expand_failed = _expand(root, run_id, config, datasets, sources, [r["version"] for r in ingested], errors)
    valuations, value_failed, unvalued = _value(root, run_id, config, shards, errors)
    exports = _export(root, run_id, config, unvalued)
    stages = {
        "ingested": ingested,
        "indexes": indexes,
        "shards": shards,
        "valuations": valuations,
        "exports": exports,
        "failed_shards": failed + expand_failed + value_failed,
    }
    return stages, datasets
