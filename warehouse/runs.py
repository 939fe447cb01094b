"""Run bookkeeping: one ``runs`` row per run, rewritten as the run moves through its states.

A run id names a build's outputs. By default it is derived from the config name and hash, so
rebuilding an unchanged config rewrites the same partitions (identical tables, cache hits)
instead of piling up copies; pass an explicit id to keep several builds of one config apart.
"""

from __future__ import annotations

import datetime as dt
import json

from ragfactory.schemas.tables import SCHEMA_VERSION
from ragfactory.warehouse.store import Warehouse, safe_name

RUN_SHARD = "run"


def default_run_id(name: str, config_hash: str) -> str:
    return safe_name(f"{name}-{config_hash[:10]}")


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def record_run(
    warehouse: Warehouse,
    run_id: str,
    flow: str,
    status: str,
    config: dict,
    config_hash: str,
    started_at: dt.datetime,
    failed_shards: list[str] | None = None,
    error: str | None = None,
    warnings: list[str] | None = None,
    inputs: list[dict] | None = None,
) -> dict:
    """Write (or replace) the run's row; ``finished_at`` is set once the status is final.

    ``warnings`` are what the run wants a reader of its figures to know (a build that draws on
    held-out questions, an evaluation on questions its model trained on). ``inputs`` are the
    ingested versions it read, ``{"dataset", "version"}`` each (``ingests.version``): what
    selects its questions, and what a reader joins to ``ingests`` to see which file it was.
    """
    row = {
        "run_id": run_id,
        "flow": flow,
        "status": status,
        "schema_version": SCHEMA_VERSION,
        "config_hash": config_hash,
        "config": json.dumps(config, sort_keys=True),
        "started_at": started_at,
        "finished_at": None if status == "running" else now(),
        "failed_shards": sorted(failed_shards or []),
        "error": error,
        "warnings": list(warnings or []),
        "inputs": [{"dataset": i["dataset"], "version": i["version"]} for i in inputs or []],
    }
    warehouse.write("runs", [row], shard=RUN_SHARD)
    return row
