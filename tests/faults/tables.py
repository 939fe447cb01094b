"""Every table of a warehouse as comparable rows: what a repaired warehouse must equal
(``tests/faults/test_damage.py``, ``test_repair.py``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from ragfactory.schemas.tables import TABLES
from ragfactory.warehouse.store import Warehouse

# Columns that say when a row was written, not what it holds; and the runs row's config, which
# names the root (each test repairs a copy of the undisturbed warehouse, elsewhere). Its hash
# leaves the root out, so a repaired copy keeps it.
VOLATILE = {"runs": {"started_at", "finished_at", "flow_run_id"}, "llm_calls": {"created_at", "latency_ms", "cached"}}


def table_rows(root: Path) -> dict[str, list[dict]]:
    """Every table's rows, sorted, without the columns that only time them."""
    wh, tables = Warehouse(root), {}
    for table in TABLES:
        files = wh.files(table)
        rows = [r for p in files for r in pq.read_table(p).to_pylist()]
        drop = VOLATILE.get(table, set()) | {"config"}
        tables[table] = sorted(repr(sorted((k, v) for k, v in r.items() if k not in drop)) for r in rows)
    return tables
