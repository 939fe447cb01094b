"""Quarantine keeps a loss visible: a set-aside shard stays in the manifest until it is rebuilt."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ragfactory.cli import app
from ragfactory.warehouse.integrity import check
from ragfactory.warehouse.quarantine import quarantine
from tests.warehouse.filled import fill, rows

SHARD = "nodes/run_id=r1/shard0.parquet"


def test_a_quarantined_shard_is_named_until_a_rebuilt_file_is_committed(warehouse):
    fill(warehouse)
    path = warehouse.root / SHARD
    path.write_bytes(path.read_bytes()[:50])
    problems = check(warehouse)
    assert [(p.kind, p.path) for p in problems] == [("damaged", SHARD)]

    assert quarantine(warehouse, problems, "T1") == problems
    assert not path.exists() and (warehouse.root / "_quarantine" / "T1" / SHARD).stat().st_size == 50
    kept = json.loads((warehouse.root / "_quarantine" / "T1" / "_manifest" / f"{SHARD}.json").read_text())
    assert kept["rows"] == 2 and "quarantined" not in kept
    [problem] = check(warehouse)
    assert (problem.kind, problem.path, problem.detail) == (
        "quarantined",
        SHARD,
        f"its 2 rows set aside in _quarantine/T1/{SHARD}, not rebuilt yet",
    )
    assert quarantine(warehouse, [problem], "T2") == []  # nothing left to move; the entry stays

    result = CliRunner().invoke(app, ["check", "--root", str(warehouse.root)])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"1 file(s) under {warehouse.root} cannot be trusted; 1 of them quarantined or missing: their rows are "
        f"not in the warehouse; `ragfactory check --repair --root {warehouse.root}` rebuilds the damaged ones"
    )

    warehouse.write("nodes", rows("nodes"), shard="shard0")  # what a repair's rebuild commits
    assert check(warehouse) == []


def test_a_deleted_shard_stays_missing_and_is_not_moved(warehouse):
    fill(warehouse)
    (warehouse.root / SHARD).unlink()
    problems = check(warehouse)
    assert [(p.kind, p.path) for p in problems] == [("missing", SHARD)]
    assert quarantine(warehouse, problems, "T1") == []
    assert [(p.kind, p.path) for p in check(warehouse)] == [("missing", SHARD)]


def _cli(root, *args: str) -> tuple[int, list[str], str]:
    """Exit code, the `error:` lines and the whole output of `ragfactory <args> --root <root>`."""
    result = CliRunner().invoke(app, [*args, "--root", str(root)])
    return result.exit_code, [line for line in result.output.splitlines() if line.startswith("error:")], result.output


def _cannot_read(root, kind: str, detail: str) -> str:
    return (
        f"table nodes cannot be read: {kind} file nodes/run_id=r1/shard1.parquet ({detail}); list the damage with "
        f"`ragfactory check --root {root}`, rebuild it with `ragfactory check --repair --root {root}`"
    )


def _deleted_shard(warehouse) -> str:
    """Two rows in every table, then a nodes shard committed and deleted by hand; the line that
    names it."""
    fill(warehouse)
    warehouse.write("nodes", rows("nodes"), shard="shard1")
    (warehouse.root / "nodes" / "run_id=r1" / "shard1.parquet").unlink()
    return _cannot_read(warehouse.root, "missing", "the manifest records it but the file is gone")


def test_a_deleted_shard_fails_its_tables_answers_instead_of_counting_what_is_left(warehouse):
    line = _deleted_shard(warehouse)

    code, errors, out = _cli(warehouse.root, "sql", "select count(*) from nodes")
    assert (code, errors) == (1, [f"error: query failed: Invalid Input Error: {line}"]), out
    code, errors, out = _cli(warehouse.root, "tables")
    assert (code, errors) == (1, [f"error: {line}"]), out
    assert "│ questions " in out
    code, errors, out = _cli(warehouse.root, "sql", "select count(*) as n from questions", "--format", "csv")
    assert (code, out.splitlines()) == (0, ['"n"', "2"])


def test_a_quarantined_shard_fails_its_tables_answers_until_it_is_rebuilt(warehouse):
    fill(warehouse)
    warehouse.write("nodes", rows("nodes"), shard="shard1")
    path = warehouse.root / "nodes" / "run_id=r1" / "shard1.parquet"
    path.write_bytes(path.read_bytes()[:50])
    quarantine(warehouse, check(warehouse), "T1")
    detail = "its 2 rows set aside in _quarantine/T1/nodes/run_id=r1/shard1.parquet, not rebuilt yet"

    code, errors, out = _cli(warehouse.root, "sql", "select count(*) from nodes")
    assert (code, errors) == (
        1,
        [f"error: query failed: Invalid Input Error: {_cannot_read(warehouse.root, 'quarantined', detail)}"],
    ), out

    warehouse.write("nodes", rows("nodes"), shard="shard1")  # what a repair's rebuild commits
    code, errors, out = _cli(warehouse.root, "sql", "select count(*) as n from nodes", "--format", "csv")
    assert (code, out.splitlines()) == (0, ['"n"', "4"])


def test_a_deleted_shard_fails_warehouse_path_reads_and_the_dashboard_by_name(warehouse):
    from fastapi.testclient import TestClient

    from ragfactory.dashboard.app import create_app

    line = _deleted_shard(warehouse)
    # a filter on the table's columns reads it too, never an empty answer
    code, errors, out = _cli(warehouse.root, "sql", "select count(*) from nodes where run_id = 'r1'")
    assert (code, errors) == (1, [f"error: query failed: Invalid Input Error: {line}"]), out
    for path in (
        "warehouse://nodes/*/*.parquet",
        "warehouse://**/*.parquet",
        "warehouse://nodes/run_id=r1/shard1.parquet",
    ):
        code, errors, out = _cli(warehouse.root, "sql", f"select count(*) from read_parquet('{path}')")
        assert (code, errors) == (1, [f"error: read_parquet('{path}'): {line}"]), out
    code, errors, out = _cli(warehouse.root, "sql", "select count(*) from 'warehouse://nodes/*/*.parquet'")
    assert (code, errors) == (1, [f"error: from 'warehouse://nodes/*/*.parquet': {line}"]), out
    # a listing shows the files there are; another table's files still read
    code, _, out = _cli(warehouse.root, "sql", "select count(*) as n from glob('warehouse://nodes/*/*')", "-f", "csv")
    assert (code, out.splitlines()) == (0, ['"n"', "1"])
    code, _, out = _cli(
        warehouse.root,
        "sql",
        "select count(*) as n from read_parquet('warehouse://questions/*/*.parquet')",
        "-f",
        "csv",
    )
    assert (code, out.splitlines()) == (0, ['"n"', "2"])

    client = TestClient(create_app(warehouse))
    page = client.get("/api/tree", params={"run": "r1", "strategy": "decex", "question": "question_id-0"})
    assert (page.status_code, page.text) == (500, f"this page cannot be answered: Invalid Input Error: {line}")
    console = client.get("/sql.csv", params={"q": "select count(*) from read_parquet('warehouse://nodes/*/*.parquet')"})
    assert (console.status_code, console.text) == (400, f"read_parquet('warehouse://nodes/*/*.parquet'): {line}")
