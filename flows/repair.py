"""The `repair` flow: rebuild what quarantined warehouse files held, by running their runs again.

``ragfactory check --repair`` moves every damaged file to ``_quarantine/`` (``warehouse.integrity``)
and then runs this flow with ``plan_repair``'s answer. Which run wrote a file follows from where
it lies:

- a file under ``<table>/run_id=<id>/`` belongs to run ``<id>``: a build or an evaluation is run
  again with the config its ``runs`` row recorded, under the same run id. A build's shard cache
  then runs only the shards whose files are gone (``tasks.expand.shard_written``) and rewrites its
  exports; its engine calls come from the call cache, so the rebuilt rows equal the lost ones.
- a ``questions`` / ``rejects`` file under ``dataset=<name>/``, or a ``passages`` file under
  ``source=<name>/``, was written by ingestion: the newest build whose config lists that dataset
  (or corpus file) runs again, or, for a bundled dataset no build lists, the bundled file is
  ingested again.
- a saved index folder under ``artifacts/indexes/`` is built again by the newest build, whose
  shards are all cache hits.
- what cannot be rebuilt from the warehouse (a ``runs`` row, whose config is the recipe; a
  trained model; a run whose row is gone) is listed for the person to redo, never guessed.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from ragfactory.flows.runs import log_prefect_settings
from ragfactory.tasks.data.config import DatasetConfig
from ragfactory.tasks.ingest import ingest_dataset
from ragfactory.tasks.repair_plan import plan_repair, rebuild_config, run_rows
from ragfactory.warehouse.catalog import refresh_catalog
from ragfactory.warehouse.store import Warehouse

__all__ = ["plan_repair", "repair"]


@flow(name="repair", log_prints=True)
def repair(root: str, runs: list[str], ingest: list[str]) -> dict:
    """Ingest the bundled datasets again and run the runs again, each with its recorded config
    and run id; returns each run's status."""
    from ragfactory.flows.build import build
    from ragfactory.flows.evaluate import evaluate

    wh = Warehouse(root)
    logger = get_run_logger()
    log_prefect_settings(logger)
    for name in ingest:
        ingest_dataset(root, DatasetConfig(name=name))
    rows = run_rows(wh)
    statuses = {}
    for run_id in runs:
        row = rows[run_id]
        config = rebuild_config(row, root)
        logger.info("running %s run %s again", row["flow"], run_id)
        if row["flow"] == "build":
            state = build(config, run_id=run_id, return_state=True)
        else:
            state = evaluate(config, return_state=True)
        # a partial run ends in a Failed state that still carries its summary
        result = state.result(raise_on_failure=False)
        statuses[run_id] = result["status"] if isinstance(result, dict) else f"failed: {result}"
    refresh_catalog(wh)
    return {"runs": statuses, "ingested": ingest}
