"""What one build produced, for its Prefect artifacts: a table of counts and the SQL to dig in.

The counts come from the warehouse itself (the run's partition of every run-scoped table, the
rejects of the datasets it read, the per-strategy view), so the artifact shows what landed, not
what the tasks meant to write. Engine figures come from the shard results: a shard whose task was
a cache hit did no engine work in this run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ragfactory.schemas.tables import TABLES
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.sql_files import sql_file
from ragfactory.warehouse.store import Warehouse

STRATEGY_COLUMNS = {
    "nodes": "n_nodes",
    "format errors": "n_format_errors",
    "well-formed": "well_formed",
    "sft rows": "n_sft_examples",
    "pairs": "n_preference_pairs",
    "trajectories": "n_trajectories",
    "rewarded trajectories": "n_rewarded_trajectories",
    "step labels": "n_step_labels",
    "scored plans": "n_scored_plans",
}


def artifact_key(name: str, suffix: str = "") -> str:
    """A Prefect artifact key (lowercase letters, digits, dashes) for a build config name."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "build"
    return f"build-{slug}{'-' + suffix if suffix else ''}"


def run_counts(wh: Warehouse, run_id: str) -> dict[str, int]:
    """Rows per run-scoped table in the run's partition (one query over the catalog)."""
    tables = [
        table
        for table, spec in sorted(TABLES.items())
        if spec.partition_by == ("run_id",) and table not in ("runs", "models", "evals", "eval_compare")
    ]
    sql = " union all ".join(
        f"select '{table}' as name, count(*) as n from {table} where run_id = $run" for table in tables
    )
    rows = query(wh, sql, {"run": run_id}).to_pylist()
    return {row["name"]: row["n"] for row in sorted(rows, key=lambda row: row["name"])}


def report_rows(wh: Warehouse, run_id: str, datasets: Iterable[str], shards: Iterable[Mapping[str, Any]]) -> list[dict]:
    """The build's artifact table: one ``{"item", "value"}`` row per figure."""
    shards = list(shards)
    executed = [s for s in shards if not s.get("cached")]
    rows = [{"item": f"rows {table}", "value": n} for table, n in run_counts(wh, run_id).items()]
    rejects = (
        query(wh, "select count(*) as n from rejects where list_contains($d, dataset)", {"d": sorted(datasets)})
        .column("n")[0]
        .as_py()
    )
    rows.append({"item": "rejects", "value": rejects})
    for row in query(wh, "select * from strategy_summary where run_id = $run", {"run": run_id}).to_pylist():
        rows += [
            {"item": f"{row['strategy']} {label}", "value": row[column]} for label, column in STRATEGY_COLUMNS.items()
        ]
    engine = [s.get("engine") or {} for s in executed]
    rows += [
        {"item": "shards", "value": len(shards)},
        {"item": "cached shards", "value": len(shards) - len(executed)},
        {"item": "engine calls", "value": sum(e.get("engine_calls", 0) for e in engine)},
        {"item": "engine requests", "value": sum(e.get("requests", 0) for e in engine)},
        {"item": "engine cache hits", "value": sum(e.get("hits", 0) for e in engine)},
    ]
    return rows


def report_markdown(run_id: str, catalog: str, rows: list[dict]) -> str:
    """A markdown note with the run's headline figures and SQL to inspect it."""
    figures = {row["item"]: row["value"] for row in rows}
    examples = sql_file("ragfactory.warehouse", "report_examples", folder="queries").replace("$run_id", f"'{run_id}'")
    return f"""# Build `{run_id}`

{figures.get("shards", 0)} shards ({figures.get("cached shards", 0)} cached),
{figures.get("engine calls", 0)} engine calls, {figures.get("engine cache hits", 0)} cached samples,
{figures.get("rejects", 0)} rejected dataset rows.

Inspect it with `ragfactory sql` (or `duckdb {catalog}`):

```sql
{examples}
```
"""
