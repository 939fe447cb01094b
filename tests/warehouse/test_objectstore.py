"""A warehouse in an object store: shards uploaded whole with their entries, mirrors that pull
and check them, against a real S3-compatible server on 127.0.0.1 (``s3`` fixture)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragfactory.warehouse.integrity import is_intact, manifest_path
from ragfactory.warehouse.objectstore import ObjectStoreError, Pulled, mirror_of
from ragfactory.warehouse.store import Warehouse

REPO = Path(__file__).resolve().parents[2]


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
            "passage_ids": ["p1"],
        }
        for i in range(n)
    ]


def _machine(tmp_path: Path, name: str, monkeypatch) -> Path:
    """Another machine's home: its own mirrors."""
    home = tmp_path / name
    monkeypatch.setenv("RAGFACTORY_HOME", str(home))
    return home


def _keys(s3, bucket: str) -> list[str]:
    listed = s3.client().list_objects_v2(Bucket=bucket).get("Contents", [])
    return sorted(item["Key"] for item in listed)


def test_the_mirror_of_a_store_is_under_the_home_and_a_bucket_is_needed(tmp_path):
    assert (
        mirror_of("s3://team/warehouses/nightly", tmp_path)
        == tmp_path / "mirrors" / "s3" / "team" / "warehouses" / "nightly"
    )
    with pytest.raises(ValueError, match=r"warehouse root 's3://': name a bucket"):
        mirror_of("s3://", tmp_path)
    with pytest.raises(ValueError, match=r"name a bucket"):
        mirror_of("s3://team/../other", tmp_path)


def test_a_shard_is_uploaded_with_its_entry_and_another_machine_pulls_it(s3, tmp_path, monkeypatch):
    uri = s3.bucket("written") + "/wh"
    home_a = _machine(tmp_path, "a", monkeypatch)
    wh = Warehouse(uri)
    assert wh.root == home_a.resolve() / "mirrors" / "s3" / "written" / "wh" and wh.location == "s3://written/wh"
    wh.write("nodes", _nodes("r1", 3), shard="s0")
    assert _keys(s3, "written") == ["wh/_manifest/nodes/run_id=r1/s0.parquet.json", "wh/nodes/run_id=r1/s0.parquet"]
    entry = json.loads(
        s3.client().get_object(Bucket="written", Key="wh/_manifest/nodes/run_id=r1/s0.parquet.json")["Body"].read()
    )
    assert entry["path"] == "nodes/run_id=r1/s0.parquet" and entry["rows"] == 3

    _machine(tmp_path, "b", monkeypatch)
    other = Warehouse(uri)
    assert other.read("nodes").num_rows == 0  # nothing until it pulls
    assert other.pull() == Pulled(downloaded=1, current=0)
    assert other.read("nodes").to_pylist() == wh.read("nodes").to_pylist()
    assert is_intact(other.root, other.files("nodes")[0])
    assert other.pull() == Pulled(downloaded=0, current=1)

    wh.write("nodes", _nodes("r1", 2, value=1.0), shard="s0")  # a rerun replaces the shard
    assert other.pull() == Pulled(downloaded=1, current=0)
    assert other.read("nodes").column("value").to_pylist() == [1.0, 1.0]


def test_an_object_changed_in_the_store_is_refused_by_name_and_the_mirror_keeps_its_copy(s3, tmp_path, monkeypatch):
    uri = s3.bucket("tampered") + "/wh"
    _machine(tmp_path, "a", monkeypatch)
    Warehouse(uri).write("nodes", _nodes("r1", 3), shard="s0")
    _machine(tmp_path, "b", monkeypatch)
    mirror = Warehouse(uri)
    mirror.pull()
    s3.client().put_object(
        Bucket="tampered",
        Key="wh/_manifest/nodes/run_id=r1/s0.parquet.json",
        Body=json.dumps(
            {"version": 1, "path": "nodes/run_id=r1/s0.parquet", "rows": 9, "bytes": 1, "sha256": "0" * 64}
        ).encode(),
    )
    with pytest.raises(
        ObjectStoreError,
        match=r"s3://tampered/wh: nodes/run_id=r1/s0.parquet is not the object "
        r"that was written \(\d+ bytes, sha256 [0-9a-f]{12}…; recorded 1 bytes",
    ):
        mirror.pull()
    assert mirror.read("nodes").num_rows == 3 and is_intact(mirror.root, mirror.files("nodes")[0])


def test_a_recorded_object_missing_from_the_store_is_named(s3, tmp_path, monkeypatch):
    uri = s3.bucket("missing") + "/wh"
    _machine(tmp_path, "a", monkeypatch)
    Warehouse(uri).write("nodes", _nodes("r1", 1), shard="s0")
    s3.client().delete_object(Bucket="missing", Key="wh/nodes/run_id=r1/s0.parquet")
    _machine(tmp_path, "b", monkeypatch)
    with pytest.raises(ObjectStoreError, match=r"nodes/run_id=r1/s0.parquet is recorded but not in the store"):
        Warehouse(uri).pull()


def test_a_shard_the_store_refused_is_not_recorded_on_this_machine_either(s3, tmp_path, monkeypatch):
    _machine(tmp_path, "a", monkeypatch)
    wh = Warehouse("s3://no-such-bucket/wh")
    with pytest.raises(ObjectStoreError, match=r"s3://no-such-bucket/wh: cannot upload nodes/run_id=r1/s0.parquet"):
        wh.write("nodes", _nodes("r1", 1), shard="s0")
    path = wh.shard_path("nodes", {"run_id": "r1"}, "s0")
    assert not manifest_path(wh.root, path).exists() and not is_intact(wh.root, path)


@pytest.mark.subprocess
def test_ragfactory_sql_on_an_s3_root_pulls_and_answers(s3, tmp_path, monkeypatch):
    uri = s3.bucket("queried") + "/wh"
    _machine(tmp_path, "a", monkeypatch)
    Warehouse(uri).write("nodes", _nodes("r1", 3), shard="s0")
    env = {**os.environ, **s3.env, "RAGFACTORY_HOME": str(tmp_path / "laptop")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragfactory.cli",
            "sql",
            "--root",
            uri,
            "select count(*) as n, count(distinct node_id) as ids from nodes",
            "--format",
            "csv",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == '"n","ids"\n3,3\n'
    assert (
        f"mirror of s3://queried/wh at {tmp_path / 'laptop'}" in done.stderr
        and "1 shard(s) of nodes downloaded, 0 current" in done.stderr
    )


@pytest.mark.subprocess
def test_ragfactory_sql_pulls_only_the_tables_its_query_reads(s3, tmp_path, monkeypatch):
    """A laptop asking for a count of nodes downloads no question; asking a shipped view that
    reads questions (questions_per_dataset) then downloads that table, and only it."""
    uri = s3.bucket("partial") + "/wh"
    _machine(tmp_path, "a", monkeypatch)
    wh = Warehouse(uri)
    wh.write("nodes", _nodes("r1", 2), shard="s0")
    wh.write("nodes", _nodes("r2", 1), shard="s0")
    wh.write(
        "questions",
        [{"question_id": "q1", "dataset": "hotpotqa", "split": "dev", "question": "Who?", "golden_answers": ["Ann"]}],
        shard="s0",
    )
    env = {**os.environ, **s3.env, "RAGFACTORY_HOME": str(tmp_path / "laptop")}

    def ask(query: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "ragfactory.cli", "sql", "--root", uri, query, "--format", "csv"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    first = ask("select count(*) as n from nodes")
    assert first.stdout == '"n"\n3\n' and "2 shard(s) of nodes downloaded, 0 current" in first.stderr
    _machine(tmp_path, "laptop", monkeypatch)
    laptop = Warehouse(uri)  # the laptop's mirror, as it stands (no pull)
    assert laptop.files("questions") == [] and len(laptop.files("nodes")) == 2
    second = ask("select dataset, n_questions from questions_per_dataset")
    assert second.stdout == '"dataset","n_questions"\n"hotpotqa",1\n'
    assert "1 shard(s) of questions, rejects downloaded, 0 current" in second.stderr
    assert len(laptop.files("questions")) == 1


def test_a_run_another_machine_holds_is_not_abandoned_from_here(s3, tmp_path, monkeypatch):
    from ragfactory.warehouse.runs import holding_run, mark_abandoned_runs, now

    uri = s3.bucket("held") + "/wh"
    _machine(tmp_path, "a", monkeypatch)
    first = Warehouse(uri)
    with holding_run(first, run_id="nightly", flow="build", config={}, config_hash="x", started_at=now()) as hold:
        _machine(tmp_path, "b", monkeypatch)
        other = Warehouse(uri)
        other.pull()
        assert other.read("runs").to_pylist()[0]["status"] == "running"
        assert mark_abandoned_runs(other) == []  # its lock is on machine a, not here
        assert other.read("runs").to_pylist()[0]["status"] == "running"
        hold.record("completed")
    other.pull()
    assert other.read("runs").to_pylist()[0]["status"] == "completed"


FLOW_RUN = "2f7c1c8e-5d1a-4b7e-9a43-0c6d2b1e8f10"


def test_a_run_another_machine_held_is_abandoned_once_its_flow_run_ended(s3, tmp_path, monkeypatch):
    """Machine b ran "nightly" an hour ago (its lock file names that run); machine a runs it now
    and is killed. b's old lock file does not make a's run look held here, and a's run is
    abandoned only when the Prefect server the machines share says its flow run ended."""
    import datetime as dt

    from ragfactory.warehouse.runs import holding_run, mark_abandoned_runs, now

    uri = s3.bucket("crashed") + "/wh"
    run = {"run_id": "nightly", "flow": "build", "config": {}, "config_hash": "x"}
    _machine(tmp_path, "b", monkeypatch)
    with holding_run(Warehouse(uri), started_at=now() - dt.timedelta(hours=1), **run) as earlier:
        earlier.record("completed")
    _machine(tmp_path, "a", monkeypatch)
    with holding_run(Warehouse(uri), started_at=now(), flow_run_id=FLOW_RUN, **run):
        _machine(tmp_path, "b", monkeypatch)
        other = Warehouse(uri)
        other.pull()
        assert mark_abandoned_runs(other) == []  # b's lock file names b's own, earlier run
        assert mark_abandoned_runs(other, ended={}.get) == []  # the server knows nothing of it
        assert mark_abandoned_runs(other, ended={FLOW_RUN: "Crashed"}.get) == ["nightly"]
    [row] = other.read("runs").to_pylist()
    assert (row["status"], row["error"]) == ("abandoned", f"abandoned: its Prefect flow run {FLOW_RUN} ended Crashed")
    _machine(tmp_path, "c", monkeypatch)
    third = Warehouse(uri)
    third.pull()
    assert third.read("runs").to_pylist()[0]["status"] == "abandoned"  # pushed to the store
