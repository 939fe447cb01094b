"""A SQL surface that cannot take the machine, and a catalog rewritten only when it changes.

A person's query (``ragfactory sql``, the dashboard's SQL page) runs within a memory limit, a
time limit and, on the dashboard, a row limit; each ends the query with one line naming the
limit and how to raise it, and nothing spills to disk. The queries run over a warehouse of 60
``nodes`` rows: the cross join of four copies, sorted at random, is 13 M rows of every column,
far past a 256 MiB limit; a hash summed over five copies (778 M rows, minutes of work) needs no
memory and runs past a one-second time limit. (A plain count of them would not: DuckDB answers
it in under a second.)
"""

from __future__ import annotations

import math

import duckdb
import psutil
import pytest
from typer.testing import CliRunner

from ragfactory.cli import app
from ragfactory.schemas.tables import TABLES
from ragfactory.warehouse.catalog import LimitReached, SqlLimits, confined_connection, user_query
from ragfactory.warehouse.confined import close, default_memory_limit
from tests.warehouse.filled import PARTITION_VALUES, fill, sample

CROSS_JOIN = "select a.*, b.*, c.*, d.* from nodes a, nodes b, nodes c, nodes d order by random()"
LONG_COUNT = (
    "select sum(hash(a.node_id, b.node_id, c.node_id, d.node_id, e.node_id)) "
    "from nodes a, nodes b, nodes c, nodes d, nodes e"
)


@pytest.fixture
def nodes(warehouse):
    schema = TABLES["nodes"].schema
    warehouse.write(
        "nodes",
        [{f.name: PARTITION_VALUES.get(f.name) or sample(f.type, f.name, i) for f in schema} for i in range(60)],
        shard="shard0",
    )
    return warehouse


def _sql(*args: str):
    result = CliRunner().invoke(app, ["sql", *args])
    return result.exit_code, result.output.splitlines()


def test_the_cross_join_ends_with_the_memory_limit_line(nodes):
    code, lines = _sql(CROSS_JOIN, "--root", str(nodes.root), "--memory-limit", "256MiB", "--timeout", "300")
    assert code == 1
    assert lines == [
        "error: query stopped: it needs more than its 256MiB memory limit (raise it with "
        "--memory-limit or $RAGFACTORY_SQL_MEMORY_LIMIT; nothing spills to disk)"
    ]


def test_a_long_query_ends_with_the_time_limit_line(nodes, monkeypatch):
    monkeypatch.setenv("RAGFACTORY_SQL_TIMEOUT_S", "1")
    code, lines = _sql(LONG_COUNT, "--root", str(nodes.root))
    assert code == 1
    assert lines == [
        "error: query stopped: it ran past its 1 s time limit (raise it with --timeout or $RAGFACTORY_SQL_TIMEOUT_S)"
    ]
    code, lines = _sql("select count(*) as n from nodes", "--root", str(nodes.root), "--format", "csv")
    assert (code, lines) == (0, ['"n"', "60"])


RAM = f"{math.floor(psutil.virtual_memory().total / 2**30 * 10) / 10:.1f}GiB"  # rounded down
MEMORY_RANGE = (
    f"a memory limit is a size in KB, MB, GB, TB, KiB, MiB, GiB or TiB from 64MiB to {RAM} (this machine's RAM)"
)
TIME_RANGE = "a time limit is a number of seconds from 0.1 to 86400 (a day)"


@pytest.mark.parametrize(
    "options, env, line",
    [
        (["--memory-limit=-5GB"], {}, f"--memory-limit=-5GB: {MEMORY_RANGE}"),
        (["--memory-limit", "1KB"], {}, f"--memory-limit=1KB: {MEMORY_RANGE}"),
        (["--memory-limit", "64TiB"], {}, f"--memory-limit=64TiB: {MEMORY_RANGE}"),
        ([], {"RAGFACTORY_SQL_MEMORY_LIMIT": "lots"}, f"$RAGFACTORY_SQL_MEMORY_LIMIT=lots: {MEMORY_RANGE}"),
        (["--timeout", "0"], {}, f"--timeout=0: {TIME_RANGE}"),
        (["--timeout", "inf"], {}, f"--timeout=inf: {TIME_RANGE}"),
        ([], {"RAGFACTORY_SQL_TIMEOUT_S": "-1"}, f"$RAGFACTORY_SQL_TIMEOUT_S=-1: {TIME_RANGE}"),
        ([], {"RAGFACTORY_SQL_TIMEOUT_S": "0"}, f"$RAGFACTORY_SQL_TIMEOUT_S=0: {TIME_RANGE}"),
        ([], {"RAGFACTORY_SQL_TIMEOUT_S": "nan"}, f"$RAGFACTORY_SQL_TIMEOUT_S=nan: {TIME_RANGE}"),
        ([], {"RAGFACTORY_SQL_TIMEOUT_S": "inf"}, f"$RAGFACTORY_SQL_TIMEOUT_S=inf: {TIME_RANGE}"),
        ([], {"RAGFACTORY_SQL_MAX_ROWS": "0"}, "$RAGFACTORY_SQL_MAX_ROWS=0: a row limit is a whole number from 1 up"),
    ],
    ids=[
        "negative-memory",
        "1KB",
        "past-RAM",
        "memory-word",
        "timeout-0",
        "timeout-inf",
        "env-timeout-negative",
        "env-timeout-0",
        "env-timeout-nan",
        "env-timeout-inf",
        "env-rows-0",
    ],
)
def test_a_limit_out_of_its_range_is_one_line_naming_where_it_came_from_and_the_range(
    nodes, monkeypatch, options, env, line
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, lines = _sql("select count(*) as n from nodes", "--root", str(nodes.root), *options)
    assert (code, lines) == (1, [f"error: {line}"])


def test_the_dashboard_row_limit_names_itself_and_a_result_within_it_is_whole(nodes):
    limits = SqlLimits(max_rows=59, flags=False)
    with pytest.raises(LimitReached) as refused:
        user_query(nodes, "select node_id from nodes", limits=limits)
    assert str(refused.value) == (
        "query stopped: its result has more than 59 rows, the row limit here (add a "
        "LIMIT, use `ragfactory sql`, or raise it with $RAGFACTORY_SQL_MAX_ROWS where "
        "this server starts)"
    )
    assert user_query(nodes, "select node_id from nodes", limits=SqlLimits(max_rows=60)).num_rows == 60


def test_the_limits_come_from_the_options_then_the_environment_and_are_locked(warehouse, monkeypatch):
    monkeypatch.setenv("RAGFACTORY_SQL_MEMORY_LIMIT", "300MiB")
    monkeypatch.setenv("RAGFACTORY_SQL_MAX_ROWS", "7")
    assert SqlLimits.from_env({"max_rows": 1000}).max_rows == 7
    assert SqlLimits.from_env(memory_limit="1GiB").memory_limit == "1GiB"
    con = confined_connection(fill(warehouse))
    try:
        settings = con.execute("select current_setting('memory_limit'), current_setting('temp_directory')").fetchall()
        assert settings == [("300.0 MiB", "")]
        with pytest.raises(duckdb.Error):
            con.execute("set memory_limit = '20GiB'")
    finally:
        close(con)


def test_the_default_memory_limit_is_a_modest_share():
    number, unit = float(default_memory_limit()[:-3]), default_memory_limit()[-3:]
    assert unit == "GiB" and 1.0 <= number <= 4.0


def test_tables_twice_leaves_the_catalog_file_as_it_was_and_a_new_table_rewrites_it(nodes):
    runner = CliRunner()
    assert runner.invoke(app, ["tables", "--root", str(nodes.root)]).exit_code == 0
    catalog = nodes.catalog_path
    before = (catalog.read_bytes(), catalog.stat().st_mtime_ns)
    assert runner.invoke(app, ["tables", "--root", str(nodes.root)]).exit_code == 0
    assert (catalog.read_bytes(), catalog.stat().st_mtime_ns) == before
    fill(nodes)  # every table gets files: their views read them now
    assert runner.invoke(app, ["tables", "--root", str(nodes.root)]).exit_code == 0
    assert catalog.stat().st_mtime_ns != before[1]


@pytest.fixture(autouse=True)
def _prefect():
    """Overrides the folder's: this module runs no flow in this process, so no Prefect server."""
    yield
