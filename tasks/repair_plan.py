"""What ``ragfactory check --repair`` must run again, and whether it can run here: plain Python.

``plan_repair`` reads which run wrote each quarantined or missing file from where it lies (the
rules are in ``flows/repair.py``'s docstring); ``check_repair`` is the repair's preflight: every
run it will run again must still have a config that validates and passes the preflight of its
flow (``tasks/preflight.py``) on this machine, checked before anything is set aside or Prefect
starts, so a repair that cannot run fails in seconds and moves nothing.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq
from pydantic import ValidationError

from ragfactory.flows.config import BuildConfig, EvalConfig
from ragfactory.tasks.data.loaders import bundled_names
from ragfactory.tasks.preflight import PreflightError, check_build, check_evaluation
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
    return any(d.get("name") == name for d in config.get("datasets", [])) or any(Path(f).stem == name for f in files)


def _latest_build(rows: dict[str, dict], wanted=lambda row: True) -> str | None:
    """The run id of the newest build among ``rows`` that ``wanted`` accepts; None when there is none."""
    builds = sorted((r for r in rows.values() if r["flow"] == "build" and wanted(r)), key=lambda r: r["started_at"])
    return builds[-1]["run_id"] if builds else None


def plan_repair(wh: Warehouse, problems: list[Problem]) -> dict:
    """What to run again for the given quarantined or missing files.

    Returns ``{"runs": [run ids to run again], "ingest": [bundled datasets to ingest again],
    "manual": [one line per file no run can rebuild, saying what to do]}``.
    """
    rows = run_rows(wh)
    runs, ingest, manual = set(), set(), []
    for problem in problems:
        table, column, value = _partition(problem.path)
        if table == "artifacts":  # a trainer file, artifacts/<client>/<run>/<file>: its run exports it again
            value = Path(problem.path).parts[2]
        if problem.table == "index":
            if latest := _latest_build(rows):  # its shards are cached: the build only indexes its passages again
                runs.add(latest)
            else:
                manual.append(f"{problem.path}: no build in this warehouse; the next one rebuilds the index")
        elif table == "runs":
            manual.append(
                f"{problem.path}: the runs row of {value} is its recipe and cannot be rebuilt; "
                "run again the command that made it"
            )
        elif table in INGESTED:
            if latest := _latest_build(rows, partial(_ingested_by, column=column, name=value)):
                runs.add(latest)
            elif column == "dataset" and value in bundled_names():
                ingest.add(value)
            else:
                manual.append(
                    f"{problem.path}: no build in this warehouse ingests {value}; run again the build that did"
                )
        elif value not in rows:
            manual.append(f"{problem.path}: run {value} has no readable runs row; run it again by hand")
        elif rows[value]["flow"] not in REBUILDABLE_FLOWS:
            manual.append(f"{problem.path}: run {value} is a {rows[value]['flow']} run; run it again by hand")
        else:
            runs.add(value)
    return {"runs": sorted(runs), "ingest": sorted(ingest), "manual": manual}


def rebuild_config(row: dict, root: str) -> BuildConfig | EvalConfig:
    """The config a run recorded, pointed at ``root`` (the recorded root may be where the
    warehouse was built, not where it is now); a ValidationError if it no longer validates."""
    config = json.loads(row["config"])
    config["warehouse"] = {**config.get("warehouse", {}), "root": root}
    if row["flow"] == "build":
        return BuildConfig.model_validate(config)
    return EvalConfig.model_validate({k: v for k, v in config.items() if k not in ("model_id", "model_ref")})


def check_repair(wh: Warehouse, runs: list[str]) -> None:
    """Raise :class:`PreflightError` naming each run to run again whose recorded config does not
    validate or whose preflight fails here (an input file gone, a model that does not resolve)."""
    rows = run_rows(wh)
    problems = []
    for run_id in runs:
        row = rows[run_id]
        try:
            config = rebuild_config(row, str(wh.location))
            check = check_build if row["flow"] == "build" else check_evaluation
            check(config, wh)  # a build's check imports its runner.preload (plugged engines) first
        except (ValidationError, PreflightError) as exc:
            problems.append(f"run {run_id}: {' '.join(str(exc).split())}")
    if problems:
        raise PreflightError("cannot rebuild: " + "; ".join(problems))
