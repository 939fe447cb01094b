"""The DuckDB catalog: a view per warehouse table over its Parquet, plus the views in ``sql/`` and
those the search strategies ship (``tasks/search/<name>/views/``).

The catalog file holds view definitions only, so it is small and cheap to rebuild: a refresh
writes a new file beside the old one and renames it over, which never blocks a person who has
the catalog open read-only in the duckdb CLI (they keep the old file until they reconnect).
Tables without files yet get a typed, empty view so queries and joins work from the first run.

Every query a person writes (``ragfactory sql``, a dashboard's console) goes through
``user_query`` or ``confined_connection``: the same views over ``warehouse://`` paths on a
connection that reads the root and nothing else and writes nowhere (``warehouse.confined``),
after ``warehouse.guard`` has checked each statement. The factory's own SQL (parameters, never a
person's text) runs through ``query`` on a plain connection, where DuckDB reads local Parquet
natively and on every thread. The catalog file keeps plain paths, for the
duckdb CLI (``duckdb -readonly catalog.duckdb``), the unrestricted way in.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa

from ragfactory.atomic import atomic_path
from ragfactory.plugins import view_folders
from ragfactory.schemas.tables import TABLES
from ragfactory.warehouse.confined import (
    LimitReached,
    SqlLimits,
    close,
    confined_duckdb,
    refusal,
    rows_refusal,
    within_limits,
)
from ragfactory.warehouse.guard import (
    ReadRefused,
    Refused,
    WriteRefused,
    check_read_only,
    literal_paths,
    parser_connection,
    serialized_tree,
    walk_tree,
)
from ragfactory.warehouse.integrity import damage_message, damaged_files, first_line, lost_files
from ragfactory.warehouse.readonly_fs import PREFIX, PROTOCOL, warehouse_url
from ragfactory.warehouse.store import Warehouse

__all__ = [
    "LimitReached",
    "ReadRefused",
    "Refused",
    "SqlLimits",
    "WriteRefused",
    "check_read_only",
    "confined_connection",
    "connect",
    "create_views",
    "query",
    "refresh_catalog",
    "sql_views",
    "table_view_sql",
    "tables_read",
    "user_query",
]

# A view whose file stem ends so is one part's process labels as long rows (run_id, strategy,
# question_id, node_id, source, value, scale); the catalog unions them all as ``step_labels_all``,
# so a strategy (or a scorer) adds its labels by shipping one file, and no shared SQL names it.
LABEL_PART_SUFFIX = "_step_labels"
LABELS_VIEW = "step_labels_all"


def sql_views() -> dict[str, str]:
    """The views shipped in ``warehouse/sql/`` and in the folders plugged parts registered (each
    search strategy's ``views/``, ``ragfactory/plugins.py``): file stem -> ``with … select``
    text, by name, and ``step_labels_all``, the union of the ``*_step_labels`` ones. Two files of
    one name are an error naming both."""
    found: dict[str, tuple[str, str]] = {}
    for folder in [resources.files("ragfactory.warehouse") / "sql", *view_folders()]:
        for entry in folder.iterdir():
            name = entry.name[:-4]
            if not entry.name.endswith(".sql"):
                continue
            if name in found:
                raise ValueError(f"view {name!r} is defined twice: {found[name][0]} and {entry}")
            found[name] = (str(entry), entry.read_text(encoding="utf-8").strip().rstrip(";"))
    views = {name: found[name][1] for name in sorted(found)}
    parts = [name for name in views if name.endswith(LABEL_PART_SUFFIX)]
    if parts:  # every plugged part's step labels, one long table (docs/labels.md)
        union = " union all by name ".join(f'select * from "{name}"' for name in parts)
        views[LABELS_VIEW] = f"with parts as ({union}) select * from parts"
    return views


def tables_read(sql: str) -> set[str] | None:
    """The warehouse tables ``sql`` reads: through their views, through the shipped views that
    read them, or as ``warehouse://<table>/…`` files. None when that cannot be told (a statement
    the parser does not take or describe, a reader whose path the query computes): then every
    table may be read. A mirror pulls only these before the query (``ragfactory sql``)."""
    found = _read_closure(sql, sql_views())
    if found is None:
        return None
    names, paths = found
    return (names | {path[len(PREFIX) :].split("/", 1)[0] for path in paths if path.startswith(PREFIX)}) & TABLES.keys()


def referenced(sql: str, views: dict[str, str] | None = None) -> set[str] | None:
    """The tables and shipped views (of ``views``, default ``sql_views()``) ``sql`` reads, with those
    they read in turn; None when the parser cannot tell (then all). Creating only these (not two
    dozen tables, as many views, a scan of each table's files) is most of a query's cost saved."""
    views = sql_views() if views is None else views
    found = _read_closure(sql, views)
    return None if found is None else found[0] & (TABLES.keys() | views.keys())


def _read_closure(sql: str, views: dict[str, str]) -> tuple[set[str], set[str]] | None:
    """The names ``sql`` reads (lower case, as DuckDB matches them) with those the views among
    them read in turn, and the literal reader paths of all of them; None when one cannot be told."""
    names, paths, pending = set(), set(), [sql]
    while pending:
        found = _references(pending.pop())
        if found is None:
            return None
        new = {name.lower() for name in found[0]} - names
        paths |= found[1]
        pending += [views[name] for name in new if name in views]
        names |= new
    return names, paths


@lru_cache(maxsize=512)
def _references(sql: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """The table names and literal reader paths in ``sql``'s statements (kept per text: queries
    walk the same shipped views); None when one cannot be described or a path is computed."""
    names, paths = set(), set()
    con = parser_connection()
    try:
        for statement in con.extract_statements(sql):
            tree = serialized_tree(statement.query, con)
            if tree.get("error"):
                return None
            for node in walk_tree(tree):
                if node.get("type") == "BASE_TABLE":
                    names.add(str(node.get("table_name", "")))
                elif node.get("type") == "TABLE_FUNCTION":
                    listed = literal_paths(node.get("function") or {})
                    if listed is None:
                        return None
                    paths.update(listed)
    except duckdb.Error:
        return None
    return frozenset(names), frozenset(paths)


def _quote(path: str) -> str:
    return "'" + path.replace("'", "''") + "'"


def _empty_select(schema: pa.Schema, failing: str | None = None) -> str:
    """No row, typed like ``schema``; with ``failing`` (an ``error()`` call) a read raises it, and
    so does each column: a constant null column lets DuckDB fold a filter on it to no row unread."""
    types = parser_connection().from_arrow(schema.empty_table()).types
    nulls = [f"cast(null as {t})" for t in types]
    if failing is not None:
        nulls = [f"case when {failing} is null then {null} end" for null in nulls]
    columns = ", ".join(f'{null} as "{f.name}"' for f, null in zip(schema, nulls))
    return f"select {columns} where false" if failing is None else f"select {columns} where {failing} is null"


def table_view_sql(warehouse: Warehouse, table: str, confined: bool = False) -> str:
    """A table's view body: its Parquet files by local path, or by ``warehouse://`` path."""
    spec = TABLES[table]
    if not warehouse.files(table):
        return _empty_select(spec.schema)
    files = warehouse.glob(table)
    files = warehouse_url(warehouse.root, Path(files)) if confined else files
    # Unioned by name with the typed empty table, so a column added to the schema after the
    # files were written reads as null instead of failing the views that name it.
    return (
        f"select * from read_parquet({_quote(files)}, "
        "hive_partitioning = true, hive_types_autocast = false, union_by_name = true) "
        f"union all by name {_empty_select(spec.schema)}"
    )


def create_views(
    con: duckdb.DuckDBPyConnection,
    warehouse: Warehouse,
    confined: bool = False,
    names: set[str] | None = None,
    views: dict[str, str] | None = None,
    whole: bool = True,
) -> None:
    """Create the table views and the shipped SQL views (``views``, by default ``sql_views()``)
    on a connection; only those in ``names`` when given (``referenced``).

    A table with a damaged file (``warehouse.integrity.quick_damage``: its size is not the one
    recorded, or DuckDB cannot read it) or, with ``whole``, a recorded shard whose file is gone
    (quarantined or missing: ``lost_files``) gets a view that fails when read, with one line
    naming the file and the commands that list and repair it; every other table, and the shipped
    views that do not read that table, keep working.
    """
    for table in TABLES if names is None else [t for t in TABLES if t in names]:
        damaged = damaged_files(warehouse, table) + (lost_files(warehouse, table) if whole else [])
        if not damaged:
            try:
                con.execute(f'create or replace view "{table}" as {table_view_sql(warehouse, table, confined)}')
                continue
            except duckdb.Error as exc:
                damaged = damaged_files(warehouse, table, footer=True) or [
                    ("damaged", f"a file of {table}", first_line(exc))
                ]
        con.execute(f'create or replace view "{table}" as {_failing_select(warehouse, table, damaged)}')
    views = sql_views() if views is None else views
    create_sql_views(con, views if names is None else {k: v for k, v in views.items() if k in names})


def create_sql_views(con: duckdb.DuckDBPyConnection, views: dict[str, str]) -> None:
    """Create ``views`` on ``con``, each after the shipped views it reads: DuckDB binds a view
    when it is created, and ``label_agreement`` reads ``step_labels_all``, which reads the parts."""
    pending = dict(views)
    while pending:
        failed: dict[str, str] = {}
        for name, body in pending.items():
            try:
                con.execute(f'create or replace view "{name}" as {body}')
            except duckdb.CatalogException as exc:  # a view it reads is not there yet
                failed[name], error = body, exc
        if len(failed) == len(pending):
            raise error
        pending = failed


def _failing_select(warehouse: Warehouse, table: str, damaged: list[tuple[str, str, str]]) -> str:
    # Typed like the table, so views over it still bind; reading it raises the message.
    return _empty_select(TABLES[table].schema, f"error({_quote(damage_message(warehouse, table, damaged))})")


class _Unchanged(Exception):
    """The catalog just built holds the views the file already holds."""


def refresh_catalog(warehouse: Warehouse) -> Path:
    """Rebuild the catalog file's views; atomic for readers. The file is replaced only when its
    views change: a refresh of an unchanged warehouse leaves its bytes and mtime as they were, so
    a tool that watches the file (or a backup) sees no change that is not one."""
    warehouse.root.mkdir(parents=True, exist_ok=True)
    target = warehouse.catalog_path
    try:
        with atomic_path(target) as tmp:
            try:
                con = duckdb.connect(str(tmp))
                try:
                    create_views(con, warehouse)
                    wanted = _views(con)
                finally:
                    con.close()
            finally:
                tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
            if wanted == _file_views(target):
                raise _Unchanged
    except _Unchanged:
        pass
    return target


def _views(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    return con.execute("select view_name, sql from duckdb_views() where not internal order by 1").fetchall()


def _file_views(path: Path) -> list[tuple[str, str]] | None:
    """The views of the catalog file at ``path``; None when there is none or it cannot be read."""
    if not path.is_file():
        return None
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return None
    try:
        return _views(con)
    finally:
        con.close()


def confined_connection(warehouse: Warehouse, limits: SqlLimits | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection holding the catalog's views, current as of now, and confined.

    It reads files under the root only, as ``warehouse://`` paths, and writes none
    (``warehouse.confined``); close it with ``warehouse.confined.close``. In-process readers use
    this rather than the catalog file: DuckDB shares one database instance per file path inside
    a process, so a long-lived process (a worker, the server) holding the file open would not
    see a refreshed catalog.
    """
    con = confined_duckdb(warehouse.root, limits)
    try:
        create_views(con, warehouse, confined=True)
    except BaseException:
        close(con)
        raise
    return con


def connect(warehouse: Warehouse, sql: str | None = None, whole: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory connection holding the catalog's views over local paths, current as of now:
    every one, or those ``sql`` reads (``referenced``); ``whole``: see ``create_views``.

    For the factory's own queries (``query``) and counts (``ragfactory tables``, the dashboard's
    pages): SQL written here, never a user's text. DuckDB reads local Parquet natively, on all
    its threads.
    """
    con = duckdb.connect()
    views = sql_views()
    names = None if sql is None else referenced(sql, views)
    create_views(con, warehouse, names=names, views=views, whole=whole)
    return con


def query(warehouse: Warehouse, sql: str, params: list | dict | None = None) -> pa.Table:
    """Run one of the factory's own read-only queries; the last statement's result.

    Only SELECTs run (``check_read_only``); a person's SQL goes through ``user_query`` instead.
    """
    statements = check_read_only(sql)
    # Not ``whole``: a repair runs its runs one after another, each reading tables in which the
    # shards of the runs after it are still quarantined; what people read fails on those.
    con = connect(warehouse, sql, whole=False)
    try:
        for statement in statements[:-1]:
            con.execute(statement.query)
        return con.sql(statements[-1].query, params=params).to_arrow_table()
    finally:
        con.close()


def user_query(
    warehouse: Warehouse,
    sql: str,
    params: list | dict | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
    limits: SqlLimits | None = None,
) -> pa.Table:
    """Run a person's read-only query through the confined catalog; the last statement's result.

    Raises ``Refused`` (naming the statement kind, function or path, and why) for anything but
    reads of the warehouse, whether the statement checks or the connection itself stopped it, and
    ``LimitReached`` for a query past ``limits`` (default ``SqlLimits.from_env()``: memory, time,
    rows; ``warehouse.confined``). ``con``, a ``confined_connection`` of this warehouse, serves
    many queries (a dashboard, a test sending hundreds); without it each query opens and closes
    its own. Reuse is sound because nothing that passes the checks can change the connection: no
    DDL, no SET, no ATTACH.
    """
    limits = limits or SqlLimits.from_env()
    owned = con is None
    con = confined_connection(warehouse, limits) if owned else _confined(con)
    try:
        statements = check_read_only(sql, con, warehouse.root)
        with within_limits(con, limits):
            for statement in statements[:-1]:
                con.execute(statement.query)
                con.complete()  # only the last result is returned; the others still run, to fail loudly
            return _fetch(con.sql(statements[-1].query, params=params), limits)
    except LimitReached:
        raise
    except duckdb.Error as exc:
        refused = refusal(exc)
        if refused is None:
            raise
        raise refused from exc
    finally:
        if owned:
            close(con)


def _fetch(result: duckdb.DuckDBPyRelation, limits: SqlLimits) -> pa.Table:
    """The result as one arrow table; past ``limits.max_rows`` rows, ``LimitReached`` instead of
    holding the rest."""
    if limits.max_rows is None:
        return result.to_arrow_table()
    reader = result.to_arrow_reader(min(limits.max_rows + 1, 100_000))
    batches, rows = [], 0
    for batch in reader:
        batches.append(batch)
        rows += batch.num_rows
        if rows > limits.max_rows:
            raise rows_refusal(limits)
    return pa.Table.from_batches(batches, schema=reader.schema)


def _confined(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    locked, external = con.execute(
        "select current_setting('lock_configuration'), current_setting('enable_external_access')"
    ).fetchall()[0]
    if not (locked and not external and con.filesystem_is_registered(PROTOCOL)):
        raise ValueError("user_query(con=...) takes a confined_connection, not an ordinary DuckDB connection")
    return con
