"""Prefect tasks of the nightly pipeline (``flows/nightly.py``): which earlier nights' exports a
night trains on, and the promotion decision, read from and written to the warehouse.

The decision itself is ``tasks/eval/promotion.py`` (a paired bootstrap on the valid partition);
here it gets each model's per-question scores from ``evals`` and its row goes to ``promotions``.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow.parquet as pq
from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from ragfactory.tasks.eval.promotion import METRICS, PromotionConfig, decide, promotion_row
from ragfactory.tasks.eval.runner import aggregate
from ragfactory.tasks.llm.cache import utc_now
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.sql_files import sql_file
from ragfactory.warehouse.store import Warehouse

EARLIER_SQL = sql_file("ragfactory.tasks", "nightly_earlier")


@task(task_run_name="earlier-nights", cache_policy=NONE)
def earlier_nights(root: str, build_name: str, run_id: str, window: int) -> list[str]:
    """The ``window`` newest build runs of the same build name before run ``run_id``, newest
    first: the earlier nights whose exports this night trains on too."""
    wh = Warehouse(root)
    if not window:
        return []
    [started] = wh.read("runs", run_id=run_id).column("started_at").to_pylist() or [None]
    params = {"run_id": run_id, "name": build_name, "n": window, "before": started or utc_now()}
    return query(wh, EARLIER_SQL, params).column("run_id").to_pylist()


def export_rows(root: str, table: str, run_ids: list[str]) -> int:
    """How many rows export ``table`` holds under the given build runs."""
    wh = Warehouse(root)
    return sum(pq.read_metadata(f).num_rows for run_id in run_ids for f in wh.files(table, run_id=run_id))


def completed_evaluation(root: str, run_id: str) -> dict | None:
    """The summary of evaluation run ``run_id`` when its ``runs`` row says completed (a
    resumed night reads it back instead of answering again), else None."""
    wh = Warehouse(root)
    status = wh.read("runs", run_id=run_id).column("status").to_pylist()
    if status != ["completed"]:
        return None
    rows = wh.read("evals", run_id=run_id).to_pylist()
    model_id = rows[0]["model_id"] if rows else None
    return {"run_id": run_id, "model_id": model_id, "status": "completed", "aggregates": aggregate(rows)}


def scores_sql(metric: str) -> str:
    """The per-question mean of evals column ``metric``: one of ``METRICS`` by name, so only a
    known column name is ever written into the query."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    return sql_file("ragfactory.tasks", "nightly_scores").replace("{metric}", metric)


def valid_scores(wh: Warehouse, run_id: str | None, metric: str, mode: str) -> dict[str, float]:
    """Question id -> ``metric`` of evaluation run ``run_id`` in ``mode`` (empty without a run)."""
    if run_id is None:
        return {}
    rows = query(wh, scores_sql(metric), {"run_id": run_id, "mode": mode}).to_pylist()
    return {row["question_id"]: float(row["score"]) for row in rows}


def night_decision(root: str, pipeline: str, night: str) -> dict | None:
    """The ``promotions`` row a night already recorded (a resumed night decides once)."""
    rows = Warehouse(root).read("promotions", pipeline=pipeline, night=night).to_pylist()
    return rows[0] if rows else None


@task(task_run_name="promote-{night}", cache_policy=NONE)
def promote(
    root: str,
    pipeline: str,
    night: str,
    candidate: str | None,
    incumbent: str,
    candidate_run: str | None,
    incumbent_run: str | None,
    config: PromotionConfig,
    build_run_id: str | None = None,
) -> dict:
    """Decide between the night's candidate and the incumbent on their valid evaluations, and
    record it in ``promotions``; returns the row."""
    wh = Warehouse(root)
    scores = {
        name: valid_scores(wh, run, config.metric, config.mode)
        for name, run in (("candidate", candidate_run), ("incumbent", incumbent_run))
    }
    decision = decide(scores["candidate"], scores["incumbent"], config, same_model=candidate == incumbent)
    if candidate is None:  # every method was skipped: the night's exports held no row to train on
        decision = replace(decision, reason="no candidate: nothing was trained this night")
    row = promotion_row(pipeline, night, candidate or "", incumbent, config, decision, utc_now(), build_run_id)
    wh.write("promotions", [row], night)
    get_run_logger().info(
        "night %s: %s %s over %s (%s)",
        night,
        decision.decision,
        candidate or "no candidate",
        incumbent,
        decision.reason,
    )
    return row
