"""Manifest entries of committed shards, the shard cache's trust in them, and ``check``."""

from __future__ import annotations

import hashlib
import json

import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ragfactory.tasks.expand import SHARD_TABLES, shard_written
from ragfactory.warehouse.catalog import query, user_query
from ragfactory.warehouse.integrity import check, manifest_path


def _nodes(run_id: str, n: int) -> list[dict]:
    return [
        {
            "node_id": f"{run_id}-{i}",
            "run_id": run_id,
            "question_id": "q1",
            "path": str(i),
            "depth": 1,
            "kind": "answer",
            "value": 0.5,
        }
        for i in range(n)
    ]


def _keep_rows(path, n: int) -> None:
    """Rewrite a shard file by hand with its first ``n`` rows, as another tool would."""
    pq.write_table(pq.read_table(path).slice(0, n), path)


def _expand_shard(wh, run_id: str, shard: str, nodes: int) -> None:
    """The files ``expand_trees`` leaves for one shard: nodes rows, the other tables empty."""
    wh.write("nodes", _nodes(run_id, nodes), shard)
    for table in SHARD_TABLES[1:]:
        wh.write(table, [], shard, partition={"run_id": run_id})


def test_a_committed_shard_records_rows_bytes_and_hash(warehouse):
    path = warehouse.write("nodes", _nodes("r1", 3), shard="s0")
    sidecar = warehouse.root / "_manifest" / "nodes" / "run_id=r1" / "s0.parquet.json"
    assert manifest_path(warehouse.root, path) == sidecar
    entry = json.loads(sidecar.read_text())
    data = path.read_bytes()
    assert entry["path"] == "nodes/run_id=r1/s0.parquet"
    assert entry["rows"] == 3
    assert entry["bytes"] == len(data)
    assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert [p.name for p in (warehouse.root / "nodes").rglob("*")] == ["run_id=r1", "s0.parquet"]


def test_manifest_sidecars_are_not_read_as_data(warehouse):
    warehouse.write("nodes", _nodes("r1", 3), shard="s0")
    warehouse.write("nodes", _nodes("r2", 2), shard="s0")
    assert warehouse.read("nodes").num_rows == 5
    assert query(warehouse, "select count(*) as n from nodes").to_pylist() == [{"n": 5}]
    everything = user_query(warehouse, "select count(*) as n from read_parquet('warehouse://nodes/**')")
    assert everything.to_pylist() == [{"n": 5}]
    assert ds.dataset(warehouse.root / "nodes", format="parquet", partitioning="hive").count_rows() == 5
    assert ds.dataset(warehouse.root, format="parquet", partitioning="hive").count_rows() == 5


def test_shard_written_trusts_only_files_that_match_their_manifest(warehouse):
    assert not shard_written(warehouse, "r1", "decex-0000")
    _expand_shard(warehouse, "r1", "decex-0000", nodes=3)
    assert shard_written(warehouse, "r1", "decex-0000")

    nodes = warehouse.shard_path("nodes", {"run_id": "r1"}, "decex-0000")
    _keep_rows(nodes, 1)  # 1 of its 3 rows: the file exists but is not the one written
    assert pq.read_table(nodes).num_rows == 1
    assert not shard_written(warehouse, "r1", "decex-0000")

    _expand_shard(warehouse, "r1", "decex-0000", nodes=3)  # the shard runs again
    assert shard_written(warehouse, "r1", "decex-0000")


def test_shard_written_wants_every_table_of_the_shard(warehouse):
    _expand_shard(warehouse, "r1", "decex-0000", nodes=3)
    calls = warehouse.shard_path("llm_calls", {"run_id": "r1"}, "decex-0000")
    manifest_path(warehouse.root, calls).unlink()  # an unrecorded file is not trusted either
    assert not shard_written(warehouse, "r1", "decex-0000")
    _expand_shard(warehouse, "r1", "decex-0000", nodes=3)
    calls.unlink()
    assert not shard_written(warehouse, "r1", "decex-0000")


def test_a_newer_shard_table_may_be_absent_but_not_lost(warehouse):
    _expand_shard(warehouse, "r1", "decex-0000", nodes=3)
    ledger = warehouse.shard_path("retrievals", {"run_id": "r1"}, "decex-0000")
    ledger.unlink()  # recorded, then gone (quarantined): the shard must run again
    assert not shard_written(warehouse, "r1", "decex-0000")
    manifest_path(warehouse.root, ledger).unlink()  # never written (a shard from before the table)
    assert shard_written(warehouse, "r1", "decex-0000")


def test_check_finds_nothing_in_a_warehouse_it_wrote(warehouse):
    assert check(warehouse) == []
    _expand_shard(warehouse, "r1", "decex-0000", nodes=3)
    warehouse.write("rejects", [{"dataset": "d", "source_file": "f", "line": 1, "reason": "x"}], "f")
    assert check(warehouse) == []


def test_check_names_a_truncated_file(warehouse):
    path = warehouse.write("nodes", _nodes("r1", 3), shard="s0")
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[: size // 2])
    [problem] = check(warehouse)
    assert (problem.table, problem.path, problem.kind) == ("nodes", "nodes/run_id=r1/s0.parquet", "damaged")
    assert f"{size // 2} bytes, recorded {size}" in problem.detail
    assert "not readable as Parquet" in problem.detail


def test_check_names_a_file_with_rows_removed(warehouse):
    path = warehouse.write("nodes", _nodes("r1", 3), shard="s0")
    warehouse.write("nodes", _nodes("r2", 2), shard="s0")
    _keep_rows(path, 1)
    [problem] = check(warehouse)
    assert (problem.path, problem.kind) == ("nodes/run_id=r1/s0.parquet", "damaged")
    assert "1 rows, recorded 3" in problem.detail
    assert str(problem).startswith("damaged: nodes/run_id=r1/s0.parquet (nodes): ")


def test_check_names_unrecorded_and_missing_files(warehouse):
    warehouse.write("nodes", _nodes("r1", 3), shard="s0")
    gone = warehouse.write("nodes", _nodes("r1", 2), shard="s1")
    stray = warehouse.root / "nodes" / "run_id=r2" / "extra.parquet"
    stray.parent.mkdir(parents=True)
    pq.write_table(pq.read_table(gone), stray)  # 2 rows, put there without the warehouse
    gone.unlink()
    problems = check(warehouse)
    assert [(p.path, p.kind) for p in problems] == [
        ("nodes/run_id=r1/s1.parquet", "missing"),
        ("nodes/run_id=r2/extra.parquet", "unrecorded"),
    ]
    assert problems[1].detail == "no manifest entry; 2 rows"


def test_a_manifest_copied_beside_another_file_does_not_vouch_for_it(warehouse):
    first = warehouse.write("nodes", _nodes("r1", 3), shard="s0")
    second = warehouse.write("nodes", _nodes("r1", 3), shard="s1")
    manifest_path(warehouse.root, second).write_text(manifest_path(warehouse.root, first).read_text())
    [problem] = check(warehouse)
    assert (problem.path, problem.kind) == ("nodes/run_id=r1/s1.parquet", "damaged")
    assert "manifest entry is for nodes/run_id=r1/s0.parquet" in problem.detail


def test_check_command_prints_one_line_per_problem_and_exits_1(warehouse):
    from typer.testing import CliRunner

    from ragfactory.cli import app

    runner = CliRunner()
    path = warehouse.write("nodes", _nodes("r1", 3), shard="s0")
    clean = runner.invoke(app, ["check", "--root", str(warehouse.root)])
    assert clean.exit_code == 0 and clean.output.startswith("ok:")
    _keep_rows(path, 1)
    manifest_path(warehouse.root, warehouse.write("nodes", _nodes("r2", 2), shard="s0")).unlink()
    result = runner.invoke(app, ["check", "--root", str(warehouse.root)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("damaged: nodes/run_id=r1/s0.parquet (nodes): ")
    assert lines[1] == "unrecorded: nodes/run_id=r2/s0.parquet (nodes): no manifest entry; 2 rows"
    assert len(lines) == 3 and lines[2].startswith("2 file(s) under ")
