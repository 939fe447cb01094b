"""Printing query results: a rich table, CSV or JSON lines, for every column type DuckDB returns.

Warehouse tables hold lists and structs (golden answers, chat messages, plan steps). Arrow's CSV
writer takes only flat columns, so those (and any other column it cannot write) go out as JSON
text in their cell; JSON lines keep them nested. Values JSON has no type for (timestamps,
intervals, UUIDs) print as their text, bytes as text with undecodable bytes escaped. Decimals
print as numbers: an integral one (DuckDB's ``sum`` of an integer column is a HUGEINT, which
arrives as a Decimal) as an integer, in every format.
"""

from __future__ import annotations

import decimal
import json
import sys
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
from rich.console import Console
from rich.table import Table
from rich.text import Text

CELL_WIDTH = 120


def print_arrow(table: pa.Table, console: Console, title: str | None = None, fmt: str = "table") -> None:
    """Print an arrow table as a rich table (on ``console``), CSV or JSON lines (on stdout)."""
    if fmt == "json":
        for row in table.to_pylist():
            sys.stdout.write(json.dumps(row, default=_plain, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return
    if fmt == "csv":
        sys.stdout.flush()  # the CSV writer goes to the byte buffer underneath
        pacsv.write_csv(csv_ready(table), sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return
    view = Table(title=title, show_lines=False)
    for name in table.column_names:
        view.add_column(Text(name))
    for row in table.to_pylist():  # Text, not str: "[b]" in the data is data, not rich markup
        view.add_row(*(Text(cell(v)) for v in row.values()))
    if not console.is_terminal:  # a log: the table's own width, so no column name is cut to ``n_quest…``
        console = Console(file=console.file, width=max(console.width, _natural_width(console, view)))
    console.print(view)


def _natural_width(console: Console, view: Table) -> int:
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(100_000), view).maximum


def csv_ready(table: pa.Table) -> pa.Table:
    """The table with every column Arrow's CSV writer cannot take turned into JSON text."""
    columns = []
    for column in table.columns:
        if _csv_writable(column.type):
            columns.append(column)
        else:
            texts = [None if v is None else _json_text(v) for v in column.to_pylist()]
            columns.append(pa.array(texts, type=pa.string()))
    return pa.Table.from_arrays(columns, names=table.column_names)


def _csv_writable(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return _csv_writable(kind.value_type)
    return not (
        pa.types.is_nested(kind)
        or pa.types.is_interval(kind)
        or pa.types.is_duration(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or pa.types.is_binary_view(kind)
        or isinstance(kind, pa.ExtensionType)
    )


def cell(value: Any) -> str:
    """A value as one short table cell: nested values as JSON, long ones cut."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, decimal.Decimal):
        return str(_number(value))
    text = value if isinstance(value, str) else _json_text(value)
    return text if len(text) <= CELL_WIDTH else text[: CELL_WIDTH - 3] + "..."


def _json_text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _plain(value)
    return json.dumps(value, default=_plain, ensure_ascii=False)


def _number(value: decimal.Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


def _plain(value: Any) -> Any:
    if isinstance(value, decimal.Decimal) and value.is_finite():
        return _number(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
