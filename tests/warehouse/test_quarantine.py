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
