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

import json
from pathlib import Path

import pyarrow.parquet as pq
from prefect import flow, get_run_logger

from ragfactory.flows.config import BuildConfig, EvalConfig
from ragfactory.tasks.data.config import DatasetConfig
from ragfactory.tasks.data.loaders import bundled_names
from ragfactory.tasks.ingest import ingest_dataset
from ragfactory.warehouse.catalog import refresh_catalog
from ragfactory.warehouse.integrity import Problem, is_intact
from ragfactory.warehouse.store import Warehouse

INGESTED = {"questions": "dataset", "rejects": "dataset", "passages": "source"}
REBUILDABLE_FLOWS = ("build", "evaluate")


def run_rows(wh: Warehouse) -> dict[str, dict]:
    """Every readable ``runs`` row, by run id (a damaged runs file is skipped, not read)."""
    rows = {}
    for path in wh.files("runs"):
        if not is_intact(wh.root, path):
            continue
        run_id = path.parent.name.partition("=")[2]
        for row in pq.read_table(path).to_pylist():
            rows[row.get("run_id") or run_id] = row | {"run_id": row.get("run_id") or run_id}
    return rows


def _partition(path: str) -> tuple[str, str, str]:
    """(table, partition column, value) of a shard path relative to the root."""
    parts = Path(path).parts
    column, _, value = parts[1].partition("=") if len(parts) > 1 else ("", "", "")
    return parts[0], column, value


def _ingested_by(row: dict, column: str, name: str) -> bool:
    config = json.loads(row["config"])
    if column == "dataset":
        return any(d.get("name") == name for d in config.get("datasets", []))
    files = config.get("corpus", {}).get("files", [])
    return any(d.get("name") == name for d in config.get("datasets", [])) or any(
        Path(f).stem == name for f in files)


def plan_repair(wh: Warehouse, problems: list[Problem]) -> dict:
    """What to run again for the given quarantined or missing files.

    Returns ``{"runs": [run ids to run again], "ingest": [bundled datasets to ingest again],
    "manual": [one line per file no run can rebuild, saying what to do]}``.
    """
    rows = run_rows(wh)
    runs, ingest, manual = set(), set(), []
    for problem in problems:
        table, column, value = _partition(problem.path)
        if problem.table == "index":
            builds = sorted((r for r in rows.values() if r["flow"] == "build"), key=lambda r: r["started_at"])
            if builds:  # its shards are cached: the build only indexes its passages again
                runs.add(builds[-1]["run_id"])
            else:
                manual.append(f"{problem.path}: no build in this warehouse; the next one rebuilds the index")
        elif table == "runs":
            manual.append(f"{problem.path}: the runs row of {value} is its recipe and cannot be rebuilt; "
                          "run again the command that made it")
        elif table in INGESTED:
            builds = sorted((r for r in rows.values() if r["flow"] == "build" and _ingested_by(r, column, value)),
                            key=lambda r: r["started_at"])
            if builds:
                runs.add(builds[-1]["run_id"])
            elif column == "dataset" and value in bundled_names():
                ingest.add(value)
            else:
                manual.append(f"{problem.path}: no build in this warehouse ingests {value}; "
                              "run again the build that did")
        elif value not in rows:
            manual.append(f"{problem.path}: run {value} has no readable runs row; run it again by hand")
        elif rows[value]["flow"] not in REBUILDABLE_FLOWS:
            manual.append(f"{problem.path}: run {value} is a {rows[value]['flow']} run; run it again by hand")
        else:
            runs.add(value)
    return {"runs": sorted(runs), "ingest": sorted(ingest), "manual": manual}


@flow(name="repair", log_prints=True)
def repair(root: str, runs: list[str], ingest: list[str]) -> dict:
    """Ingest the bundled datasets again and run the runs again, each with its recorded config
    and run id; returns each run's status."""
    from ragfactory.flows.build import build
    from ragfactory.flows.evaluate import evaluate

    wh = Warehouse(root)
    logger = get_run_logger()
    for name in ingest:
        ingest_dataset(root, DatasetConfig(name=name))
    rows = run_rows(wh)
    statuses = {}
    for run_id in runs:
        row = rows[run_id]
        config = json.loads(row["config"])
        # the recorded root may be where the warehouse was built, not where it is now
        config["warehouse"] = {**config.get("warehouse", {}), "root": root}
        logger.info("running %s run %s again", row["flow"], run_id)
        if row["flow"] == "build":
            state = build(BuildConfig.model_validate(config), run_id=run_id, return_state=True)
        else:
            fields = {k: v for k, v in config.items() if k not in ("model_id", "model_ref")}
            state = evaluate(EvalConfig.model_validate(fields), return_state=True)
        # a partial run ends in a Failed state that still carries its summary
        result = state.result(raise_on_failure=False)
        statuses[run_id] = result["status"] if isinstance(result, dict) else f"failed: {result}"
    refresh_catalog(wh)
    return {"runs": statuses, "ingested": ingest}
