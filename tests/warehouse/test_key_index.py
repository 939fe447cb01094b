"""The key index: which files may hold a key, each file's key column read once per version."""

from __future__ import annotations

import pyarrow as pa

from ragfactory.warehouse.key_index import KeyIndex
from ragfactory.warehouse.store import Warehouse

ROWS = {
    "a": [{"call_id": "c1", "run_id": "r"}, {"call_id": "c2", "run_id": "r"}],
    "b": [{"call_id": "c3", "run_id": "r"}],
    "c": [],
}


def written(tmp_path) -> tuple[Warehouse, list[str]]:
    wh = Warehouse(tmp_path / "wh")
    for shard, rows in ROWS.items():
        wh.write("llm_calls", rows, shard, partition={"run_id": "r"})
    return wh, [str(p) for p in wh.files("llm_calls")]


def test_only_the_files_holding_a_key_are_named_in_the_order_given(tmp_path):
    _, (a, b, c) = written(tmp_path)
    index = KeyIndex()
    assert index.files_holding([a, b, c], "call_id", ["c3"]) == [b]
    assert index.files_holding([c, b, a], "call_id", ["c2", "c3", "c9"]) == [b, a]
    assert index.files_holding([a, b, c], "call_id", ["c9"]) == []
    assert index.files_holding([a, b, c], "call_id", []) == []
    assert index.reads == 3  # one key column a file, whatever the lookups


def test_a_rewritten_file_is_read_again_and_its_new_keys_found(tmp_path):
    wh, (a, b, _) = written(tmp_path)
    index = KeyIndex()
    assert index.files_holding([a, b], "call_id", ["c4"]) == []
    wh.write("llm_calls", [{"call_id": "c4", "run_id": "r"}], "b", partition={"run_id": "r"})
    assert index.files_holding([a, b], "call_id", ["c4"]) == [b]
    assert index.files_holding([a, b], "call_id", ["c3"]) == []
    assert index.reads == 3  # a and b, then b's new version once


def test_a_column_the_file_lacks_reads_as_nulls_and_holds_no_key(tmp_path):
    _, (a, _, _) = written(tmp_path)
    schema = pa.schema([("call_id", pa.string()), ("cache_key", pa.string())])
    assert KeyIndex().files_holding([a], "cache_key", ["c1"], schema) == []


def test_past_its_bound_the_file_asked_about_longest_ago_is_read_again(tmp_path):
    _, (a, b, _) = written(tmp_path)
    index = KeyIndex(max_rows=2)  # a holds 2 keys, b 1: both do not fit
    index.files_holding([a], "call_id", ["c1"])
    index.files_holding([b], "call_id", ["c1"])  # 3 hashes: a is forgotten
    index.files_holding([b], "call_id", ["c1"])  # b is still known
    assert index.reads == 2
    assert index.files_holding([a], "call_id", ["c1"]) == [a]
    assert index.reads == 3
