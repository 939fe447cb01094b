"""Warehouse shards: schema conformance, atomic replacement, and readers other than DuckDB."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragfactory.schemas.tables import TABLES
from ragfactory.warehouse.store import SchemaMismatch, Warehouse, conform


def _nodes(run_id: str, n: int, value: float = 0.5) -> list[dict]:
    return [
        {
            "node_id": f"{run_id}-{i}",
            "run_id": run_id,
            "question_id": "q1",
            "path": str(i),
            "depth": 1,
            "kind": "answer",
            "value": value,
            "passage_ids": ["p1", "p2"],
        }
        for i in range(n)
    ]


def test_write_creates_hive_partition_and_reads_back(warehouse):
    path = warehouse.write("nodes", _nodes("r1", 3), shard="s0")
    assert path == warehouse.root / "nodes" / "run_id=r1" / "s0.parquet"
    rows = warehouse.read("nodes")
    assert rows.num_rows == 3
    assert rows.schema == TABLES["nodes"].schema
    assert rows.column("passage_ids").to_pylist()[0] == ["p1", "p2"]


def test_rewriting_a_shard_replaces_it_exactly(warehouse):
    warehouse.write("nodes", _nodes("r1", 5), shard="s0")
    warehouse.write("nodes", _nodes("r1", 2, value=1.0), shard="s0")
    rows = warehouse.read("nodes")
    assert rows.num_rows == 2
    assert set(rows.column("value").to_pylist()) == {1.0}
    leftovers = [p for p in (warehouse.root / "nodes").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_files_of_one_partition_are_those_write_put_there(warehouse):
    warehouse.write("nodes", _nodes("r1", 1), shard="s1")
    warehouse.write("nodes", _nodes("r1", 1), shard="s0")
    warehouse.write("nodes", _nodes("r/2", 1), shard="s0")
    runs = warehouse.root / "nodes"
    assert warehouse.partition_dir("nodes", {"run_id": "r/2"}) == runs / "run_id=r_2"
    assert warehouse.files("nodes", run_id="r1") == [
        runs / "run_id=r1" / "s0.parquet",
        runs / "run_id=r1" / "s1.parquet",
    ]
    assert warehouse.files("nodes", run_id="r/2") == [runs / "run_id=r_2" / "s0.parquet"]
    assert warehouse.files("nodes", run_id="r3") == []
    assert warehouse.files("nodes") == [
        runs / "run_id=r1" / "s0.parquet",
        runs / "run_id=r1" / "s1.parquet",
        runs / "run_id=r_2" / "s0.parquet",
    ]
    with pytest.raises(
        ValueError, match=r"nodes: not partitioned by \['dataset'\]; its partition columns are \['run_id'\]"
    ):
        warehouse.files("nodes", dataset="d")
    with pytest.raises(KeyError, match="unknown table 'node'"):
        warehouse.files("node", run_id="r1")


def test_empty_shard_with_partition_replaces_old_rows(warehouse):
    warehouse.write("rejects", [{"dataset": "d", "source_file": "f", "line": 1, "reason": "x"}], "f")
    warehouse.write("rejects", [], "f", partition={"dataset": "d"})
    assert warehouse.read("rejects").num_rows == 0


def test_shard_must_hold_one_partition_value(warehouse):
    rows = _nodes("r1", 1) + _nodes("r2", 1)
    with pytest.raises(ValueError, match="run_id"):
        warehouse.write("nodes", rows, shard="s0")


def test_failed_write_keeps_the_old_shard(warehouse):
    warehouse.write("nodes", _nodes("r1", 2), shard="s0")
    bad = _nodes("r1", 1)
    bad[0]["depth"] = "deep"
    with pytest.raises(SchemaMismatch, match="nodes"):
        warehouse.write("nodes", bad, shard="s0")
    assert warehouse.read("nodes").num_rows == 2


@pytest.mark.parametrize(
    "rows, match",
    [
        ([{"node_id": "a", "run_id": "r", "surprise": 1}], "surprise"),
        ([{"node_id": "a", "run_id": "r", "depth": "deep"}], "schema"),
    ],
)
def test_conform_refuses_what_does_not_fit(rows, match):
    with pytest.raises(SchemaMismatch, match=match):
        conform("nodes", rows)


def test_conform_casts_arrow_columns_and_names_the_bad_one():
    good = pa.table({"node_id": ["a"], "run_id": ["r"], "value": pa.array([1], pa.int64())})
    assert conform("nodes", good).schema.field("value").type == pa.float64()
    bad = pa.table({"node_id": ["a"], "run_id": ["r"], "depth": ["deep"]})
    with pytest.raises(SchemaMismatch, match=r"nodes\.depth"):
        conform("nodes", bad)


def test_unknown_table_is_named(warehouse):
    with pytest.raises(KeyError, match="nodez"):
        warehouse.write("nodez", [], shard="s")


def test_files_read_with_polars_pyarrow_and_datasets(warehouse):
    import datasets
    import polars as pl

    path = warehouse.write("nodes", _nodes("r1", 4), shard="s0")
    assert pl.read_parquet(path).height == 4
    assert pq.read_table(path).num_rows == 4
    loaded = datasets.load_dataset("parquet", data_files=str(path), split="train")
    assert loaded.num_rows == 4
    assert loaded[0]["passage_ids"] == ["p1", "p2"]
    hive = pl.scan_parquet(warehouse.glob("nodes"), hive_partitioning=True).collect()
    assert hive["run_id"].to_list() == ["r1"] * 4


def test_default_root_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGFACTORY_HOME", str(tmp_path / "elsewhere"))
    assert Warehouse().root == (tmp_path / "elsewhere").resolve()


def test_read_filters_and_prunes_partitions(warehouse):
    warehouse.write("nodes", _nodes("r1", 3), shard="s0")
    warehouse.write("nodes", _nodes("r2", 2), shard="s0")
    assert warehouse.read("nodes", run_id="r2").num_rows == 2
    assert warehouse.read("nodes", run_id="r3").num_rows == 0
    assert warehouse.read("nodes", node_id="r1-0").column("run_id").to_pylist() == ["r1"]


def test_read_of_a_partition_whose_folder_two_values_share_keeps_only_the_value_asked(warehouse):
    warehouse.write("nodes", _nodes("r/2", 2), shard="s0")
    warehouse.write("nodes", _nodes("r_2", 3), shard="s1")  # the same folder, run_id=r_2
    assert warehouse.read("nodes", run_id="r/2").column("node_id").to_pylist() == ["r/2-0", "r/2-1"]
    assert warehouse.read("nodes", run_id="r_2").num_rows == 3


def _question(qid: str, text: str, partition: str | None = "train") -> dict:
    return {"question_id": qid, "dataset": "d", "question": text, "partition": partition, "sample_key": 0.5}


def test_merge_adds_rows_and_never_removes_one(warehouse):
    part = {"dataset": "d"}
    warehouse.merge("questions", [_question("a", "A"), _question("b", "B")], "dev", part)
    merged = warehouse.merge(
        "questions", [_question("b", "B fixed", "test"), _question("c", "C")], "dev", part, keep=("partition",)
    )
    assert (merged.added, merged.replaced, merged.kept) == (1, 1, 1)
    rows = sorted(
        warehouse.read("questions").select(["question_id", "question", "partition"]).to_pylist(),
        key=lambda r: r["question_id"],
    )
    # the new row wins (a corrected source) except in the kept column: b stays in train
    assert rows == [
        {"question_id": "a", "question": "A", "partition": "train"},
        {"question_id": "b", "question": "B fixed", "partition": "train"},
        {"question_id": "c", "question": "C", "partition": "train"},
    ]


def test_merge_of_rows_already_there_leaves_the_file_untouched(warehouse):
    part = {"dataset": "d"}
    path = warehouse.shard_path("questions", part, "dev")
    warehouse.merge("questions", [_question("a", "A"), _question("b", "B")], "dev", part)
    before = path.stat().st_mtime_ns
    merged = warehouse.merge("questions", [_question("b", "B")], "dev", part)
    assert merged.changed is False and path.stat().st_mtime_ns == before
    assert warehouse.read("questions").num_rows == 2
