"""One pyarrow schema per warehouse table (docs/architecture.md, "Warehouse").

Writers cast to these schemas and refuse what does not fit. Changes are additive only: a new
column is appended with a default of null, and ``SCHEMA_VERSION`` goes up by one; the version a
run was written with is kept in its ``runs`` row. Reward and value columns are float64 (DOUBLE)
so DuckDB never hands them back as Decimal.

Each table also names the columns that partition it on disk (hive style). Run-scoped tables are
partitioned by ``run_id``; the ingested inputs (questions, passages, rejects) by their source, and
an ingest adds its rows to that source's shard by key (``Warehouse.merge``): the shard never holds
a second copy of a row, and never loses one that an earlier run read. Which rows one ingest
produced is its ``ingests`` row, named by its version (``tasks/data/versions.py``); a run lists
the versions it read in ``runs.inputs``.

The schemas themselves are in three modules beside this one, which gathers them in ``TABLES``:
``run_tables.py`` (runs, ingests), ``build_tables.py`` (the ingested inputs and the search
tables) and ``training_tables.py`` (the exported training data, models and evaluations);
``columns.py`` has ``TableSpec`` and the column types they share.
"""

from __future__ import annotations

from ragfactory.schemas.build_tables import BUILD_TABLES, GOLD_STEP, MATCHED_PAIR, PLAN_STEP
from ragfactory.schemas.columns import MESSAGE, MESSAGES, STRINGS, TS, TableSpec
from ragfactory.schemas.run_tables import RUN_INPUT, RUN_TABLES
from ragfactory.schemas.training_tables import (
    SPAN,
    STEP_SPAN,
    TRAINING_TABLES,
    VERL_COLUMNS,
    VERL_EXTRA_INFO,
    VERL_REWARD_MODEL,
)

# The version of these schemas that each run records (``runs.schema_version``); what each version
# added is in docs/warehouse.md, "Schema versions".
SCHEMA_VERSION = 9

# Bookkeeping, then what a build writes, then training and evaluation: `ragfactory tables` lists
# them in this order.
TABLES: dict[str, TableSpec] = {table.name: table for table in [*RUN_TABLES, *BUILD_TABLES, *TRAINING_TABLES]}

__all__ = [
    "GOLD_STEP",
    "MATCHED_PAIR",
    "MESSAGE",
    "MESSAGES",
    "PLAN_STEP",
    "RUN_INPUT",
    "SCHEMA_VERSION",
    "SPAN",
    "STEP_SPAN",
    "STRINGS",
    "TABLES",
    "TS",
    "TableSpec",
    "VERL_COLUMNS",
    "VERL_EXTRA_INFO",
    "VERL_REWARD_MODEL",
    "table_spec",
]


def table_spec(name: str) -> TableSpec:
    """The spec of a warehouse table, or a clear error naming the known tables."""
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known tables: {', '.join(sorted(TABLES))}") from None
