"""Prefect tasks for the train stage: plan a training, run it with retries, register the model.

Retries back off and resume: checkpoints land in the model's output folder every ``save_steps``
and a retried attempt passes the newest one to the trainer. Caching is explicit, not Prefect's
input hashing: the model id is derived from (export snapshot, method, training config, base
model), and a registered row with that id is returned without training.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NONE

from ragfactory.flows.config import TrainConfig
from ragfactory.schemas.errors import PermanentError
from ragfactory.tasks.retry import retry_unless_permanent
from ragfactory.tasks.training.registry import find_model, register_model
from ragfactory.tasks.training.runs import TrainingPlan, plan_training, registry_row, train_planned
from ragfactory.warehouse.store import Warehouse


@task(task_run_name="plan-{config.method}", cache_policy=NONE)
def plan_model(root: str, config: TrainConfig) -> dict:
    """The training's plan (model id, export snapshot, paths) and its registered row, if any."""
    wh = Warehouse(root)
    plan = plan_training(wh, config)
    return {"plan": asdict(plan), "cached": find_model(wh, plan.model_id)}


# Errors in the request itself (an empty or missing export, a TRL option that does not exist,
# every row truncated away) fail the same way on every attempt: raised as permanent, so the one
# retry policy (``tasks/retry.py``) gives up on them at once.
BAD_REQUEST = (ValueError, LookupError, TypeError)


class BadTrainingRequest(PermanentError, ValueError):
    """A training request that fails the same way on every attempt."""


# log_prints off: datasets fingerprints the trainer's map functions with dill, which disassembles
# each one into a captured stdout to find its globals; the flow's print patch sent those lines to
# the run's log instead (and left dill reading no globals). Progress goes through the run logger.
@task(
    retries=2,
    retry_delay_seconds=[10, 60],
    task_run_name="train-{config.method}",
    cache_policy=NONE,
    retry_condition_fn=retry_unless_permanent,
    log_prints=False,
)
def train_model(root: str, config: TrainConfig, plan: dict, callbacks: list | None = None) -> dict:
    """Train (resuming from the last checkpoint a failed attempt left); returns the metrics."""
    try:
        return train_planned(Warehouse(root), config, TrainingPlan(**plan), get_run_logger(), callbacks=callbacks or ())
    except BAD_REQUEST as exc:
        raise BadTrainingRequest(str(exc) or type(exc).__name__) from exc


@task(task_run_name="register-{config.method}", cache_policy=NONE)
def write_model(root: str, config: TrainConfig, plan: dict, metrics: dict) -> dict:
    """Write the ``models`` row and a table artifact of the run's metrics; returns the row."""
    wh = Warehouse(root)
    row = registry_row(wh, config, TrainingPlan(**plan), metrics)
    held_out = {k: v for k, v in json.loads(row["lineage"])["partitions"].items() if k in ("valid", "test")}
    if held_out:
        get_run_logger().warning(
            "%s trained on held-out questions %s: evaluations on those partitions mark them seen (evals.is_seen)",
            row["model_id"],
            held_out,
        )
    register_model(wh, row)
    create_table_artifact(
        [{"metric": k, "value": v} for k, v in sorted(metrics.items()) if v is not None],
        key=f"train-{row['model_id']}",
        description=f"{config.method} metrics of {row['model_id']}",
    )
    return row
