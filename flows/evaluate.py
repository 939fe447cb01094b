"""The `evaluate` flow: a model answers dataset questions in each mode; ``evals`` and a summary.

Composition only: plan (resolve the model, name the eval run), ingest the bundled datasets the
warehouse lacks, then evaluate one dataset after another (each already fills the engine with
the batched requests of all its modes and questions in flight). A dataset that still fails after
its retries is recorded in the run's ``failed_shards`` and the others go on. The aggregates go
to a table artifact and the flow's result; ``ragfactory sql "select * from eval_summary"``
compares every model evaluated in the warehouse. A comparison with a base model (``compare``)
evaluates the base the same way and writes the paired figures to ``eval_compare``.

Each evaluation holds its run as the build does (``warehouse/runs.py``: ``running`` only while
this process lives); one with failed datasets ends in a Failed Prefect state carrying the summary.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.states import State

from ragfactory.flows.config import EvalConfig
from ragfactory.flows.runs import final_state, finish, opened_warehouse, recorded_run
from ragfactory.tasks.data.config import DatasetConfig, PartitionConfig
from ragfactory.tasks.evaluate import (
    compare_evaluations,
    evaluate_dataset,
    evaluation_warnings,
    plan_evaluation,
    report_evaluation,
)
from ragfactory.tasks.ingest import backfill_question_partitions, ingest_dataset
from ragfactory.tasks.preflight import apply_network_policy, check_evaluation
from ragfactory.tasks.retry import failure_reason
from ragfactory.warehouse.catalog import refresh_catalog
from ragfactory.warehouse.store import Warehouse


def evaluate_model(wh: Warehouse, config: EvalConfig) -> dict:
    """One model through every dataset of the config: its evals rows, runs row and summary."""
    root = wh.location
    plan = plan_evaluation(root, config)
    for name in plan["ingest"]:
        ingest_dataset(root, DatasetConfig(name=name))
    backfill_question_partitions(root, PartitionConfig())
    run_config = config.model_dump(mode="json") | {"model_id": plan["model_id"], "model_ref": plan["model_ref"]}
    with recorded_run(
        wh, run_id=plan["run_id"], flow="evaluate", config=run_config, config_hash=plan["config_hash"]
    ) as hold:
        get_run_logger().info("evaluating %s as run %s in %s", plan["model_id"], plan["run_id"], root)
        done, failed, errors = [], [], {}
        for dataset in config.datasets:
            state = evaluate_dataset(root, config, plan, dataset, return_state=True)
            if state.is_completed():
                done.append(state.result())
            else:
                failed.append(dataset)
                errors[dataset] = failure_reason(dataset, state)
        aggregates = [row for result in done for row in result["aggregates"]]
        report_evaluation(plan["run_id"], plan["model_id"], aggregates)
        warnings = evaluation_warnings(config, plan["model_id"], done)
        for warning in warnings:
            get_run_logger().warning(warning)
        status = finish(hold, failed, anything_done=bool(done), unit="datasets", warnings=warnings)
    return {
        "run_id": plan["run_id"],
        "model_id": plan["model_id"],
        "root": root,
        "catalog": str(wh.catalog_path),
        "status": status,
        "aggregates": aggregates,
        "datasets": done,
        "failed_shards": failed,
        "errors": errors,
        "warnings": warnings,
    }


@flow(name="evaluate", log_prints=True)
def evaluate(config: EvalConfig) -> dict | State:
    """Evaluate the config's model on its datasets and modes; returns the per-dataset aggregates.

    With ``config.compare`` (a base model), the base answers the same questions in the same
    modes too, and ``eval_compare`` gets the paired comparison (``comparison`` in the result).
    Both models must resolve on this machine (``tasks/preflight.py``) before anything runs.
    """
    wh = opened_warehouse(config.warehouse.root)
    apply_network_policy(config.allow_downloads)
    check_evaluation(config, wh)
    summary = evaluate_model(wh, config)
    if config.compare:
        base = evaluate_model(wh, config.model_copy(update={"model": config.compare, "compare": None}))
        summary["base"] = base
        summary["comparison"] = compare_evaluations(summary["root"], config, summary["run_id"], base["run_id"])
        if base["status"] != "completed":
            summary["status"] = "partial" if summary["status"] == "completed" else summary["status"]
    refresh_catalog(wh)
    return final_state(summary)
