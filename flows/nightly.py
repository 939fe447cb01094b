"""The `nightly` flow: the data flywheel (docs/flywheel.md).

Each night: build with the promoted policy (a frontier build expands the next questions no
earlier night expanded with it; ``expand_with: config`` keeps the build's own policy, a teacher
engine that writes the same rows whichever model is promoted) → train the configured methods in
order on this night's exports and a window of earlier nights' (each from the last one's model,
the first from the incumbent) → evaluate the candidate and the incumbent on the **valid**
partition → promote the candidate only when the paired bootstrap 95 % interval of the chosen
metric's delta lies above zero (``tasks/eval/promotion.py``, a ``promotions`` row) → report the
promoted model on **test**.

Composition only. Every stage is one the project already has, and each skips what exists, so a
night that died resumes where it stopped: the build's shards are cached under its night's run
id, a training already registered under its model id trains nothing, an evaluation whose run
completed is read back, and a night with a ``promotions`` row has decided.
"""

from __future__ import annotations

import datetime as dt

from prefect import flow, get_run_logger

from ragfactory.flows.build import build
from ragfactory.flows.config import EvalConfig, NightlyConfig, TrainConfig
from ragfactory.flows.evaluate import evaluate_model
from ragfactory.flows.runs import opened_warehouse
from ragfactory.flows.train import train
from ragfactory.tasks.eval.promotion import PromotionConfig
from ragfactory.tasks.evaluate import plan_evaluation
from ragfactory.tasks.nightly import completed_evaluation, earlier_nights, export_rows, night_decision, promote
from ragfactory.tasks.training.registry import promoted_model
from ragfactory.warehouse.catalog import refresh_catalog
from ragfactory.warehouse.store import Warehouse


def _train(root: str, config: NightlyConfig, run_id: str, earlier: list[str], incumbent: str) -> list[dict]:
    """Train every configured method whose export has rows, each from the last model."""
    base, trained = incumbent, []
    for method in config.methods:
        train_config = TrainConfig(
            method=method,
            run_id=run_id,
            more_run_ids=earlier,
            base_model=base,
            trl=config.trl.get(method, {}),
            warehouse={"root": root},
        )
        if not export_rows(root, train_config.export_table, [run_id, *earlier]):
            get_run_logger().warning(
                "%s: no %s rows in this night's exports, not trained", method, train_config.export_table
            )
            continue
        summary = train(train_config)
        trained.append(
            {
                "method": method,
                "model_id": summary["model_id"],
                "status": summary["status"],
                "metrics": summary.get("metrics") or {},
            }
        )
        base = summary["model_id"]
    return trained


def evaluated(wh: Warehouse, config: NightlyConfig, model: str, partition: str) -> dict:
    """The evaluation of ``model`` on ``partition``: read back when its run completed, else run."""
    eval_config = config.evaluation.model_copy(
        update={"model": model, "partition": partition, "compare": None, "warehouse": config.build.warehouse}
    )
    eval_config = EvalConfig.model_validate(eval_config.model_dump())
    done = completed_evaluation(wh.location, plan_evaluation(wh.location, eval_config)["run_id"])
    return done or evaluate_model(wh, eval_config)


def decided(wh: Warehouse, config: NightlyConfig, night: str, candidate, incumbent: str, build_run: str) -> dict:
    """The night's decision: the candidate and the incumbent evaluated on valid, then promoted or
    kept on the interval rule (a ``promotions`` row)."""
    runs = {
        name: evaluated(wh, config, name, "valid")["run_id"] if name else None
        for name in dict.fromkeys([candidate, incumbent])
    }
    promotion = PromotionConfig(
        metric=config.metric, mode=config.mode, confidence=config.confidence, seed=config.evaluation.seed
    )
    return promote(
        wh.location,
        config.name,
        night,
        candidate,
        incumbent,
        runs[candidate],
        runs[incumbent],
        promotion,
        build_run,
    )


@flow(name="nightly", log_prints=True, retries=1, retry_delay_seconds=60)
def nightly(config: NightlyConfig, night: str | None = None) -> dict:
    """One night of the flywheel; returns what each stage did and the night's decision.

    ``night`` names the night (default: today's UTC date): its build's run id ends with it and
    its ``promotions`` row is keyed by it, so running a night again resumes it.
    """
    wh = opened_warehouse(config.build.warehouse.root)
    root = wh.location
    night = night or dt.datetime.now(dt.UTC).date().isoformat()
    incumbent = promoted_model(wh, config.name) or config.base_model
    policy = incumbent if config.expand_with == "promoted" else config.build.llm.policy.model
    get_run_logger().info("night %s of %s: incumbent %s, policy %s", night, config.name, incumbent, policy)
    built = build(config.build, policy_model=policy, night=night, return_state=True).result(raise_on_failure=False)
    if isinstance(built, BaseException):  # refused or crashed: no run to train on (a partial one has a summary)
        raise built
    earlier = earlier_nights(root, config.build.name, built["run_id"], config.window)
    trained = _train(root, config, built["run_id"], earlier, incumbent)
    candidate = trained[-1]["model_id"] if trained else None
    decision = night_decision(root, config.name, night) or decided(
        wh, config, night, candidate, incumbent, built["run_id"]
    )
    report = evaluated(wh, config, decision["promoted"], "test")
    refresh_catalog(wh)
    return {
        "night": night,
        "status": "completed",
        "build": {k: built[k] for k in ("run_id", "status")},
        "earlier": earlier,
        "trained": trained,
        "decision": decision,
        "test": {"model_id": report["model_id"], "run_id": report["run_id"], "aggregates": report["aggregates"]},
    }
