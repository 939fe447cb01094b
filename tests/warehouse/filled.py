"""A warehouse with two rows in every table, each column filled from its schema.

Values follow one rule per type (strings name their column, lists hold one element, structs fill
every field), so a test can work out by hand what a query over them returns. Partition columns
take one value per table: run_id 'r1', dataset 'd1', source 's1', pipeline 'p1'.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from ragfactory.schemas.tables import TABLES
from ragfactory.warehouse.store import Warehouse

PARTITION_VALUES = {"run_id": "r1", "dataset": "d1", "source": "s1", "pipeline": "p1"}
ROWS_PER_TABLE = 2
STAMP = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def sample(kind: pa.DataType, name: str, index: int):
    """The value of a column of type ``kind`` in row ``index``."""
    if pa.types.is_string(kind):
        return f"{name}-{index}"
    if pa.types.is_boolean(kind):
        return index % 2 == 0
    if pa.types.is_integer(kind):
        return index + 1
    if pa.types.is_floating(kind):
        return 0.5 + index
    if pa.types.is_timestamp(kind):
        return STAMP
    if pa.types.is_list(kind):
        return [sample(kind.value_type, name, index)]
    if pa.types.is_struct(kind):
        return {field.name: sample(field.type, field.name, index) for field in kind}
    raise TypeError(f"no sample value for {name}: {kind}")


def rows(table: str) -> list[dict]:
    schema = TABLES[table].schema
    return [
        {field.name: PARTITION_VALUES.get(field.name) or sample(field.type, field.name, i) for field in schema}
        for i in range(ROWS_PER_TABLE)
    ]


def fill(warehouse: Warehouse) -> Warehouse:
    """Write ``ROWS_PER_TABLE`` rows into every table of ``warehouse``, one shard each."""
    for table in TABLES:
        warehouse.write(table, rows(table), shard="shard0")
    return warehouse
