"""The confined SQL surface: it reads the warehouse and nothing else, and writes nowhere."""

from __future__ import annotations

import duckdb
import pytest

from ragfactory.warehouse.catalog import (
    ReadRefused,
    WriteRefused,
    check_read_only,
    confined_connection,
    refresh_catalog,
    sql_views,
    user_query,
)
from ragfactory.warehouse.confined import close, refusal
from tests.warehouse.filled import fill


def _tree(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def filled(warehouse):
    return fill(warehouse)


@pytest.mark.parametrize(
    "sql, named",
    [
        ("explain analyze copy (select 42 as pwned) to '/tmp/x.csv'", "EXPLAIN ANALYZE COPY"),
        ("EXPLAIN (FORMAT json, ANALYZE) copy (select 1) to 'warehouse://x.csv'", "EXPLAIN ANALYZE COPY"),
        ("explain copy (select 1) to 'warehouse://x.csv'", "EXPLAIN COPY"),
        ("/* a */ explain -- b\n analyze insert into questions values (1)", "EXPLAIN ANALYZE INSERT"),
        ("copy (select 1) to 'warehouse://runs/run_id=r1/shard0.parquet'", "COPY"),
        ("export database 'warehouse://dump'", "EXPORT"),
        ("attach 'warehouse://other.db'", "ATTACH"),
        ("create table t as select 1", "CREATE"),
        ("insert into questions values (1)", "INSERT"),
        ("delete from nodes", "DELETE"),
        ("drop view nodes", "DROP"),
        ("select 1; delete from nodes", "DELETE"),
        ("prepare p as select 1", "PREPARE"),
        ("execute p", "EXECUTE"),
        ("call checkpoint()", "CALL"),
        ("pragma enable_profiling", "PRAGMA"),
        ("load httpfs", "LOAD"),
        ("install httpfs", "LOAD"),  # DuckDB's parser gives INSTALL the LOAD statement type
        ("set enable_external_access = true", "SET"),
        ("reset allowed_directories", "SET"),
        ("set allowed_directories = ['/']", "SET"),
        ("SET disabled_filesystems = ''", "SET"),
        ("set lock_configuration = false", "SET"),
        ("pivot (select 1 as a, 2 as b) on a using sum(b)", "MULTI"),
    ],
)
def test_statements_that_could_change_something_are_refused_by_kind(filled, sql, named):
    before = _tree(filled.root)
    with pytest.raises(WriteRefused, match=f"^refused: {named} statements are not allowed"):
        user_query(filled, sql)
    assert _tree(filled.root) == before


@pytest.mark.parametrize(
    "sql, named",
    [
        ("select * from read_csv('/etc/hostname')", "read_csv('/etc/hostname')"),
        ("select * from read_text('/etc/passwd')", "read_text('/etc/passwd')"),
        ("select * from read_blob('/etc/passwd')", "read_blob('/etc/passwd')"),
        ("select * from glob('/root/*')", "glob('/root/*')"),
        ("select * from read_json_auto('/etc/hostname')", "read_json_auto('/etc/hostname')"),
        ("select * from sniff_csv('/etc/passwd')", "sniff_csv('/etc/passwd')"),
        ("select * from read_csv('https://example.com/x.csv')", "read_csv('https://example.com/x.csv')"),
        ("select * from read_text(['warehouse://runs', '/etc/passwd'])", "read_text('/etc/passwd')"),
        ("select * from read_text('warehouse://../../etc/passwd')", "warehouse://../../etc/passwd resolves outside"),
        ("select * from read_text('warehouse://' || '../etc/passwd')", "read_text() with a path computed"),
        ("select * from read_text(['warehouse://runs', '/etc/' || 'passwd'])", "read_text() with a path computed"),
        ("select * from '/etc/hosts.csv'", "from '/etc/hosts.csv' reads outside the warehouse"),
        ("from 'warehouse://../x.csv'", "from 'warehouse://../x.csv': warehouse://../x.csv resolves outside"),
        ("select * from checkpoint()", "table function checkpoint()"),
        ("select * from query('select 1')", "table function query()"),
        ("select * from enable_logging()", "table function enable_logging()"),
    ],
)
def test_reads_outside_the_warehouse_are_refused_naming_the_path_or_function(filled, sql, named):
    with pytest.raises(ReadRefused) as refused:
        user_query(filled, sql)
    assert named in str(refused.value)


def test_a_link_out_of_the_root_is_refused(filled, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    (filled.root / "link.txt").symlink_to(secret)
    with pytest.raises(ReadRefused, match="warehouse://link.txt resolves outside the warehouse root"):
        user_query(filled, "select content from read_text('warehouse://link.txt')")
    listed = user_query(filled, "select file from glob('warehouse://*.txt')").to_pylist()
    assert user_query(filled, "select count(*) as n from 'warehouse://questions/*/*.parquet'").to_pylist() == [{"n": 2}]
    assert listed == []  # a listing does not show what a link points at outside


def test_the_warehouse_own_parquet_reads_as_warehouse_paths(filled):
    rows = user_query(
        filled,
        "select question_id, dataset, golden_answers from "
        "read_parquet('warehouse://questions/*/*.parquet', hive_partitioning = true) order by 1",
    )
    assert rows.to_pylist() == [
        {"question_id": "question_id-0", "dataset": "d1", "golden_answers": ["golden_answers-0"]},
        {"question_id": "question_id-1", "dataset": "d1", "golden_answers": ["golden_answers-1"]},
    ]
    files = user_query(filled, "select file from glob('warehouse://runs/**') order by 1").column("file").to_pylist()
    assert files == ["warehouse://runs/run_id=r1/shard0.parquet"]


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("select 'drop table x; copy' as s", [{"s": "drop table x; copy"}]),
        ("-- a note first\nselect 1 as x", [{"x": 1}]),
        ("select 'explain analyze copy' as s; select 2 as y", [{"y": 2}]),
        ("with copy_of as (select 3 as x) select x from copy_of", [{"x": 3}]),
        ("pivot (select 1 as a, 2 as b) on a in (1) using sum(b)", [{"1": 2}]),
        ("select count(*) as n from range(4)", [{"n": 4}]),
    ],
)
def test_reads_run_including_keywords_inside_literals(filled, sql, expected):
    assert user_query(filled, sql).to_pylist() == expected


def test_explain_of_a_read_runs(filled):
    plan = user_query(filled, "explain analyze select count(*) from questions").to_pylist()
    assert plan[0]["explain_key"] == "analyzed_plan"
    check_read_only("explain select 1")


def test_every_shipped_view_answers_as_through_the_catalog_file(filled):
    """Confined views give the rows the catalog file's plain-path views give (hand check: one)."""
    refresh_catalog(filled)
    plain = duckdb.connect(str(filled.catalog_path), read_only=True)
    try:
        for name in sql_views():
            expected = plain.sql(f'select * from "{name}" order by all').to_arrow_table()
            assert user_query(filled, f'select * from "{name}" order by all') == expected, name
    finally:
        plain.close()
    assert user_query(filled, "select * from questions_per_dataset").to_pylist() == [
        {"dataset": "d1", "n_questions": 2, "n_with_gold_plan": 2, "n_rejects": 2}
    ]


def test_the_connection_itself_writes_nowhere_and_stays_locked(filled, tmp_path):
    """The second wall: statements the checks would refuse, sent straight to the connection."""
    outside = tmp_path / "outside"
    outside.mkdir()
    before = _tree(filled.root)
    con = confined_connection(filled)
    try:
        for sql in [
            f"copy (select 42 as pwned) to '{outside}/x.csv'",
            "copy (select 42 as pwned) to 'warehouse://runs/run_id=r1/shard0.parquet' (use_tmp_file false)",
            "copy (select 42 as pwned) to 'warehouse://new.csv'",
            "export database 'warehouse://dump'",
            f"export database '{outside}/dump'",
            "attach 'warehouse://new.duckdb'",
            f"attach '{outside}/new.duckdb'",
            "install httpfs",
            "set enable_external_access = true",
            "set disabled_filesystems = ''",
            "reset lock_configuration",
        ]:
            with pytest.raises(duckdb.Error):
                con.execute(sql)
    finally:
        close(con)
    assert _tree(filled.root) == before
    assert list(outside.iterdir()) == []


def test_the_connection_itself_reads_nothing_outside_the_root(filled, tmp_path):
    """The second wall for reads: computed paths, which the checks refuse before running them."""
    (tmp_path / "secret.txt").write_text("s3cret")
    con = confined_connection(filled)
    refusals = []
    try:
        for sql in [
            f"select content from read_text('{tmp_path}/' || 'secret.txt')",
            f"select content from read_text('warehouse://' || '{'../' * 1}secret.txt')",
            "select content from read_text('https://' || 'example.com/')",
        ]:
            with pytest.raises(duckdb.Error) as error:
                con.execute(sql).fetchall()
            refusals.append(str(refusal(error.value)))
    finally:
        close(con)
    assert refusals == [
        "refused: a local file path; only warehouse:// paths are readable here",
        f"refused: warehouse://../secret.txt resolves outside the warehouse root {filled.root}",
        "refused: a local file path; only warehouse:// paths are readable here",
    ]


def test_query_refuses_an_ordinary_connection(filled):
    with pytest.raises(ValueError, match="takes a confined_connection"):
        user_query(filled, "select 1", con=duckdb.connect())


def test_a_warehouse_file_handle_keeps_one_position_per_thread(tmp_path):
    import threading

    from ragfactory.warehouse.readonly_fs import WarehouseFileSystem

    (tmp_path / "f.bin").write_bytes(bytes(range(256)) * 4)  # byte i is i % 256
    handle = WarehouseFileSystem(tmp_path).open("warehouse://f.bin", "rb")
    seeked, proceed, seen = threading.Event(), threading.Event(), {}

    def other():
        handle.seek(700)
        seeked.set()
        proceed.wait()
        seen["other"] = handle.read(3)

    thread = threading.Thread(target=other)
    handle.seek(10)
    thread.start()
    seeked.wait()  # the other thread has moved its position in between this one's seek and read
    seen["this"] = handle.read(3)
    proceed.set()
    thread.join()
    handle.close()
    assert seen == {"this": bytes([10, 11, 12]), "other": bytes([700 % 256, 701 % 256, 702 % 256])}
    assert handle.closed


def test_reads_through_the_read_only_file_system_are_whole_every_time(tmp_path):
    """DuckDB reads a Python file system's handle as seek-then-read from several threads (its I/O
    threads, whatever its ``threads`` setting): with one shared position they tore pages (an
    error, or a wrong answer). Positions are per thread, so every read is whole."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ragfactory.warehouse.store import Warehouse

    folder = tmp_path / "bulk"  # a file under the root that no table view reads
    folder.mkdir(parents=True)
    n = 300_000
    values = np.arange(n, dtype=np.float64)
    table = pa.table({"question_id": (np.arange(n) % 97).astype(str), "value": values, "text": ["x" * 60] * n})
    pq.write_table(table, folder / "a.parquet", row_group_size=20_000)
    con = confined_connection(Warehouse(tmp_path))
    try:
        for _ in range(12):
            rows = user_query(
                Warehouse(tmp_path),
                "select count(*) as n, sum(value) as s, max(text) as t from read_parquet('warehouse://bulk/*.parquet')",
                con=con,
            ).to_pylist()
            assert rows == [{"n": n, "s": n * (n - 1) / 2, "t": "x" * 60}]  # 0 + 1 + … + (n - 1)
    finally:
        close(con)
