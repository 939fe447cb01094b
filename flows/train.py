"""The `train` flow: TRL SFT / DPO / GRPO (optionally LoRA) on an export, then the model registry.

Composition only: plan the training (its model id is a hash of the export snapshot, method,
config and base model); a model already registered under that id is returned and nothing trains;
otherwise train with retries that resume from checkpoints, write the ``models`` row and refresh
the catalog. The flow holds its run, ``train-<model id>`` (``flows/runs.py``): the ``runs`` row
says ``running`` while it trains, then ``completed``, ``failed`` or ``interrupted``.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from ragfactory.flows.config import TrainConfig
from ragfactory.flows.runs import opened_warehouse, recorded_run
from ragfactory.tasks.preflight import apply_network_policy, check_training
from ragfactory.tasks.train import plan_model, train_model, write_model
from ragfactory.warehouse.catalog import refresh_catalog


@flow(name="train", log_prints=True)
def train(config: TrainConfig) -> dict:
    """Train as the config says (or find the identical earlier training); returns a summary.

    The base model must resolve on this machine first (``tasks/preflight.py``); the training
    runs offline unless ``config.allow_downloads``.
    """
    wh = opened_warehouse(config.warehouse.root)
    root = wh.location
    apply_network_policy(config.allow_downloads)
    check_training(config, wh)
    planned = plan_model(root, config)
    plan = planned["plan"]
    run = {"run_id": f"train-{plan['model_id']}", "flow": "train", "config_hash": plan["model_id"]}
    with recorded_run(wh, config=config.model_dump(mode="json"), **run) as hold:
        if planned["cached"] is not None:
            get_run_logger().info("%s already trained: %s", plan["model_id"], planned["cached"]["path"])
            summary = {"status": "cached", "path": planned["cached"]["path"], "row": planned["cached"]}
        else:
            metrics = train_model(root, config, plan)
            row = write_model(root, config, plan, metrics)
            refresh_catalog(wh)
            summary = {"status": "trained", "path": row["path"], "metrics": metrics, "row": row}
        hold.record("completed")
    return {"model_id": plan["model_id"], **summary}
