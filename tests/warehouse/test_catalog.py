"""The DuckDB catalog: views over Parquet, shipped SQL views, read-only queries."""

from __future__ import annotations

import duckdb
import pytest

import ragfactory.tasks.search.registry  # noqa: F401  (the strategies register their views on import, as the CLI does)
from ragfactory.schemas.tables import TABLES
from ragfactory.warehouse.catalog import (
    WriteRefused,
    check_read_only,
    query,
    refresh_catalog,
    sql_views,
    tables_read,
)


def _question(dataset: str, i: int) -> dict:
    return {"question_id": f"{dataset}:{i}", "dataset": dataset, "question": "q?", "golden_answers": ["a"]}


def test_every_table_has_a_typed_view_before_any_write(warehouse):
    refresh_catalog(warehouse)
    con = duckdb.connect(str(warehouse.catalog_path), read_only=True)
    for table, spec in TABLES.items():
        columns = [row[0] for row in con.execute(f'describe "{table}"').fetchall()]
        assert columns == spec.schema.names, table
        assert con.execute(f'select count(*) from "{table}"').fetchone()[0] == 0


def test_views_see_new_shards_and_partitions(warehouse):
    warehouse.write("questions", [_question("a", 1), _question("a", 2)], "dev")
    warehouse.write("questions", [_question("b", 1)], "dev")
    refresh_catalog(warehouse)
    rows = query(warehouse, "select dataset, count(*) as n from questions group by 1").to_pylist()
    counts = {row["dataset"]: row["n"] for row in rows}
    assert counts == {"a": 2, "b": 1}


def test_shipped_sql_views_are_with_select_and_load(warehouse):
    views = sql_views()
    assert "questions_per_dataset" in views
    for name, body in views.items():  # a view may open with comments saying what it answers
        code = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))
        assert code.lower().lstrip().startswith("with "), name
    warehouse.write("questions", [_question("a", 1)], "dev")
    warehouse.write("rejects", [{"dataset": "a", "source_file": "f", "line": 3, "reason": "bad"}], "f")
    refresh_catalog(warehouse)
    rows = query(warehouse, "select * from questions_per_dataset").to_pylist()
    assert rows == [{"dataset": "a", "n_questions": 1, "n_with_gold_plan": 0, "n_rejects": 1}]


@pytest.mark.parametrize(
    "sql",
    [
        "insert into questions values (1)",
        "create table t (a int)",
        "drop view nodes",
        "copy (select 1) to '/tmp/x.csv'",
        "attach 'other.db'",
        "select 1; delete from nodes",
    ],
)
def test_writes_are_refused_with_a_clear_message(warehouse, sql):
    with pytest.raises(WriteRefused, match="refused: .* not allowed"):
        query(warehouse, sql)


@pytest.mark.parametrize(
    "sql",
    ["select 1", "with a as (select 1 as x) select x from a", "describe nodes", "show tables", "explain select 1"],
)
def test_reads_are_allowed(sql):
    check_read_only(sql)


def test_catalog_refresh_does_not_block_an_open_reader(warehouse):
    refresh_catalog(warehouse)
    reader = duckdb.connect(str(warehouse.catalog_path), read_only=True)
    assert reader.execute("select count(*) from questions").fetchone() == (0,)
    warehouse.write("questions", [_question("a", 1)], "dev")
    refresh_catalog(warehouse)
    assert query(warehouse, "select count(*) as n from questions").to_pylist() == [{"n": 1}]
    reader.close()


def test_numeric_looking_run_ids_stay_strings(warehouse):
    warehouse.write("nodes", [{"node_id": "n", "run_id": "20261121"}], "s0")
    refresh_catalog(warehouse)
    assert query(warehouse, "select run_id from nodes").to_pylist() == [{"run_id": "20261121"}]


def test_queries_from_many_threads_at_once_each_parse_on_their_own_connection(warehouse):
    """The build's shards query from threads: DuckDB's module-level functions share one default
    connection, which refuses a second thread while it is busy ("connection is busy")."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> int:
        for _ in range(8):
            assert query(warehouse, "select count(*) as n from nodes").column("n").to_pylist() == [0]
        return i

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert sorted(pool.map(one, range(6))) == list(range(6))


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        ("select count(*) from nodes", {"nodes"}),
        ('select * from Runs join "Evals" using (run_id)', {"runs", "evals"}),  # names match in any case
        # a CTE's name is not a table; a join reads both sides
        ("with x as (select * from nodes) select * from x join runs using (run_id)", {"nodes", "runs"}),
        # shipped views read their tables: questions_per_dataset counts questions and rejects
        ("select * from questions_per_dataset", {"questions", "rejects"}),
        ("select * from treeps_tree", {"nodes"}),
        ("select count(*) from read_parquet('warehouse://questions/*/*.parquet')", {"questions"}),
        (
            "select * from read_parquet(['warehouse://nodes/a.parquet', 'warehouse://rollouts/b.parquet'])",
            {"nodes", "rollouts"},
        ),
        ("select 1; select count(*) from llm_calls", {"llm_calls"}),
        ("select 42", set()),
        # cannot be told: every table may be read
        ("select * from read_parquet('warehouse://' || 'nodes/x.parquet')", None),
        ("selec nothing", None),
    ],
)
def test_the_tables_a_query_reads(sql, tables):
    assert tables_read(sql) == tables


def test_a_query_creates_the_views_it_reads_and_those_they_read():
    from ragfactory.warehouse.catalog import referenced

    assert referenced("select count(*) from nodes where run_id = $r") == {"nodes"}
    assert referenced('SELECT * FROM Runs r JOIN "evals" e USING (run_id)') == {"runs", "evals"}
    assert referenced("select 'questions' as word") == set()  # a name in a string reads nothing
    assert referenced("selec nothing") is None  # the parser cannot tell: every view is created
    agreement = referenced("select * from label_agreement")
    parts = {"apex_step_labels", "decex_step_labels", "mcts_step_labels", "r3_step_labels", "treeps_step_labels"}
    assert {"label_agreement", "step_labels_all", "nodes"} | parts <= agreement
    assert "evals" not in agreement and "preference_pairs" not in agreement
