"""The `train` flow: TRL SFT / DPO / GRPO (optionally LoRA) on an export, then the model registry.

Composition only: plan the training (its model id is a hash of the export snapshot, method,
config and base model); a model already registered under that id is returned and nothing trains;
otherwise train with retries that resume from checkpoints, write the ``models`` row and refresh
the catalog.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from ragfactory.flows.config import TrainConfig
from ragfactory.flows.runs import opened_warehouse
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
    if planned["cached"] is not None:
        get_run_logger().info("%s already trained: %s", plan["model_id"], planned["cached"]["path"])
        return {
            "status": "cached",
            "model_id": plan["model_id"],
            "path": planned["cached"]["path"],
            "row": planned["cached"],
        }
    metrics = train_model(root, config, plan)
    row = write_model(root, config, plan, metrics)
    refresh_catalog(wh)
    return {"status": "trained", "model_id": row["model_id"], "path": row["path"], "metrics": metrics, "row": row}
