"""One training run end to end, as plain functions: plan (cache key, paths), train, register.

``plan_training`` resolves the export and the base model and derives the model id from the cache
key; the caller checks the registry for that id before training (a hit trains nothing).
``train_planned`` builds the dataset, model, TRL config and trainer and runs it, resuming from a
checkpoint a failed attempt left in the output folder.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ragfactory.memory import tune_allocator
from ragfactory.tasks.llm.embedded import embedded_model_path, is_embedded
from ragfactory.tasks.rewards import RewardFunc
from ragfactory.tasks.training.config import TrainingRequest
from ragfactory.tasks.training.data import export_files, read_export, snapshot_hash, training_dataset
from ragfactory.tasks.training.methods import MethodContext, method_spec
from ragfactory.tasks.training.progress import LossLogger
from ragfactory.tasks.training.registry import (
    ModelRef,
    cache_key,
    export_question_ids,
    model_id_for,
    model_row,
    resolve_model_ref,
    seen_question_ids,
)
from ragfactory.tasks.training.rewards import run_rewards
from ragfactory.tasks.training.trackers import requested_trackers
from ragfactory.tasks.training.trainers import (
    load_model,
    lora_config,
    make_trainer,
    run_training,
    trl_args,
)
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.sql_files import sql_file
from ragfactory.warehouse.store import Warehouse


@dataclass(frozen=True)
class TrainingPlan:
    model_id: str
    export_snapshot: str
    files: tuple[str, ...]
    base_model: str
    output_dir: str
    base_model_id: str | None = None  # the base's registry id, when it is a registered model


def base_model_key(ref: ModelRef) -> str:
    """The base model as the cache key and the ``models`` row record it: the spec as written for
    the embedded model (the engine converts it), else the absolute folder or the name."""
    if ref.source == "embedded":
        return ref.spec
    path = Path(ref.load).expanduser()
    return str(path.resolve()) if path.exists() else ref.load


def loadable(base_model: str, wh: Warehouse) -> str:
    """What ``from_pretrained`` loads for a planned base: the converted embedded checkpoint, or it."""
    if is_embedded(base_model):
        return str(embedded_model_path(wh.artifacts_dir("models")))
    return base_model


def plan_training(wh: Warehouse, config: TrainingRequest) -> TrainingPlan:
    """The export snapshot, cache key, model id and output folder of a requested training."""
    files = export_files(wh.root, config.export_table, config.run_id, config.parquet)
    files += [f for run_id in config.more_run_ids for f in wh.files(config.export_table, run_id=run_id) if f.is_file()]
    snapshot = snapshot_hash(files)
    ref = resolve_model_ref(wh, config.base_model)
    base = base_model_key(ref)
    key = cache_key(snapshot, config.method, config.training_fields(), base)
    model_id = model_id_for(config.method, key)
    output = Path(config.output_dir) if config.output_dir else wh.root / "artifacts" / "models" / "trained" / model_id
    return TrainingPlan(model_id, snapshot, tuple(str(f) for f in files), base, str(output), ref.registered_id)


def train_planned(
    wh: Warehouse,
    config: TrainingRequest,
    plan: TrainingPlan,
    logger: logging.Logger | logging.LoggerAdapter,
    callbacks: Sequence = (),
    extra_rewards: Mapping[str, RewardFunc] | None = None,
) -> dict:
    """Train as planned and return the run's metrics (the weights land in ``plan.output_dir``)."""
    tune_allocator(heap_reuse=False)  # freed activations leave at once: a lower peak than heap reuse's
    rows = read_export([Path(f) for f in plan.files], config.method, config.task)
    progress = LossLogger(logger, prefix=f"{plan.model_id}: ")
    trackers, places = reporting(config, plan, logger)
    callbacks = [progress, *trackers, *callbacks]
    spec = method_spec(config.method)
    if not spec.stock:
        trainer = spec.build(method_context(wh, config, plan, rows, logger, callbacks))
        logger.info(
            "%s: %s on %d rows from %s", plan.model_id, config.method, len(trainer.train_dataset), plan.base_model
        )
        return {**run_training(trainer, plan.output_dir), **places, "n_rows": len(trainer.train_dataset)}
    dataset = training_dataset(rows, config.method)
    model, tokenizer = load_model(loadable(plan.base_model, wh))
    args = trl_args(config.method, plan.output_dir, config.save_steps, config.seed, config.trl)
    rewards = None
    if spec.rewarded:
        rewards = run_rewards(method_context(wh, config, plan, rows, logger, ()), extra_rewards)
    trainer = make_trainer(config.method, model, tokenizer, dataset, args, callbacks, rewards, lora_config(config.lora))
    logger.info("%s: %s on %d rows from %s", plan.model_id, config.method, len(dataset), plan.base_model)
    metrics = run_training(trainer, plan.output_dir)
    return {**metrics, **places, "n_rows": len(dataset)}


def reporting(config: TrainingRequest, plan: TrainingPlan, logger) -> tuple[list, dict[str, str]]:
    """The callbacks of the trackers the run's ``trackers`` option asks for (none by default),
    and where their files land (``tasks/training/trackers.py``), each logged."""
    names = requested_trackers(config.options)
    if not names:
        return [], {}
    from ragfactory.tasks.training.tracker_callbacks import tracker_callbacks

    callbacks, places = tracker_callbacks(names, plan.output_dir, config.lineage_name, plan.model_id)
    for key, place in places.items():
        logger.info("%s: %s %s", plan.model_id, key, place)
    return callbacks, places


def method_context(
    wh: Warehouse, config: TrainingRequest, plan: TrainingPlan, rows: list[dict], logger, callbacks: Sequence
) -> MethodContext:
    """What a method's ``build_trainer`` (and a reward factory) gets."""
    return MethodContext(
        rows=rows,
        model_path=loadable(plan.base_model, wh),
        output_dir=plan.output_dir,
        trl=dict(config.trl),
        save_steps=config.save_steps,
        seed=config.seed,
        callbacks=list(callbacks),
        logger=logger,
        warehouse=wh,
        run_id=config.run_id,
        rewards=list(config.rewards),
        peft_config=lora_config(config.lora),
        options=dict(config.options),
    )


def trained_question_ids(wh: Warehouse, config: TrainingRequest, plan: TrainingPlan) -> set[str]:
    """Every question the trained model saw: its export's, and what its base model saw."""
    base_id = plan.base_model_id
    seen = seen_question_ids(wh, base_id) if base_id is not None else set()
    return export_question_ids(plan.files) | seen


PARTITION_COUNTS_SQL = sql_file("ragfactory.tasks.training", "partition_counts")


def registry_row(wh: Warehouse, config: TrainingRequest, plan: TrainingPlan, metrics: dict) -> dict:
    """The ``models`` row of a finished training, with the questions it saw and their partitions."""
    seen = sorted(trained_question_ids(wh, config, plan))
    counts = query(wh, PARTITION_COUNTS_SQL, {"ids": seen}).to_pylist()
    lineage = {
        "name": config.lineage_name,
        "run_id": config.run_id,
        "table": config.export_table,
        "parquet": config.parquet,
        "task": config.task,
        "files": list(plan.files),
        "partitions": {str(row["partition"]): row["n"] for row in counts},
    }
    return model_row(
        plan.model_id,
        lineage,
        plan.base_model,
        config.method,
        plan.export_snapshot,
        config.training_fields(),
        metrics,
        plan.output_dir,
        seen,
    )
