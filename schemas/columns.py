"""What every warehouse table module shares: ``TableSpec``, the ``spec`` shorthand that makes
one, and the column types several tables use."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
MESSAGES = pa.list_(MESSAGE)
STRINGS = pa.list_(pa.string())

TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class TableSpec:
    """A warehouse table: its schema, the columns partitioning it, and its primary key."""

    name: str
    schema: pa.Schema
    partition_by: tuple[str, ...]
    key: tuple[str, ...]


def spec(name: str, partition_by: tuple[str, ...], key: tuple[str, ...], *fields) -> TableSpec:
    """The spec of table ``name``: its ``(column, type)`` fields in order, partitioned by
    ``partition_by`` and keyed by ``key``."""
    return TableSpec(name, pa.schema(list(fields)), partition_by, key)
