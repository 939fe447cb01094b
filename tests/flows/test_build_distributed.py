"""Expansion shards on a Dask cluster (``runner.kind: dask``, ``flows/runner.py``).

The same DecEx config (4 HotpotQA questions in 4 shards, the scripted engine of
``tests/cluster_engine.py``) is built with the local runner and on a temporary cluster of two
worker processes that the build starts: every table equals the local build's row for row, each
worker builds its engine once, and a worker killed mid-shard leaves the same tables once Dask
runs its shard again on the other worker. Built into an S3 server and killed mid-way, then rerun
from another machine's mirror, it leaves the same tables too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.schemas.tables import TABLES
from ragfactory.warehouse.store import Warehouse

pytestmark = [pytest.mark.cluster, pytest.mark.subprocess, pytest.mark.timeout(600)]

RUN = "cluster-test"
# When a row was written and by which flow run; the runs row's config (and so its hash) names the
# warehouse root, which differs between the two builds.
VOLATILE = {
    "runs": {"started_at", "finished_at", "flow_run_id", "config", "config_hash"},
    "ingests": {"created_at"},
    "llm_calls": {"created_at", "latency_ms", "cached"},
}
ENGINE = "scripted:cluster"  # registered by tests/cluster_engine.py
WORKERS = {"kind": "dask", "workers": 2, "preload": ["tests.cluster_engine"]}
REPO = Path(__file__).resolve().parents[2]


def _config(root: Path, runner: dict | None = None) -> BuildConfig:
    return BuildConfig.model_validate(
        {
            "name": "cluster-test",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "hotpotqa", "limit": 4}],
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
            "retrieval": {"dense": {"enabled": False}},
            "llm": {"policy": {"backend": ENGINE}},
            "search": {
                "strategies": ["decex"],
                "shard_size": 1,
                "decex": {"k": 2, "n_rollouts": 2, "t_max": 2, "termination_samples": 1},
            },
            **({"runner": runner} if runner else {}),
        }
    )


def _rows(root: Path) -> dict[str, list[str]]:
    """Every table's rows, sorted, without the columns that only say when and where."""
    wh, tables = Warehouse(root), {}
    for table in TABLES:
        rows = [r for p in wh.files(table) for r in pq.read_table(p).to_pylist()]
        drop = VOLATILE.get(table, set())
        tables[table] = sorted(repr(sorted((k, v) for k, v in r.items() if k not in drop)) for r in rows)
    return tables


@pytest.fixture(scope="module", autouse=True)
def _registered():
    """The cluster engine in this process for this module's tests, and gone after them."""
    import importlib

    from ragfactory.tasks.llm.registry import unregister_backend

    importlib.import_module("tests.cluster_engine").register()
    yield
    unregister_backend(ENGINE)


@pytest.fixture(scope="module")
def local(tmp_path_factory, prefect_api):
    root = tmp_path_factory.mktemp("local") / "wh"
    summary = build(_config(root), run_id=RUN)
    assert summary["status"] == "completed"
    assert [s["shard"] for s in summary["shards"]] == ["decex-0000", "decex-0001", "decex-0002", "decex-0003"]
    return _rows(root)


def test_a_two_worker_cluster_builds_the_local_runners_tables(local, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGFACTORY_TEST_ENGINE_LOG", str(tmp_path))
    root = tmp_path / "wh"
    summary = build(_config(root, WORKERS), run_id=RUN)
    assert summary["status"] == "completed" and summary["failed_shards"] == []
    assert len(summary["shards"]) == 4
    rows = _rows(root)
    assert {t: len(r) for t, r in rows.items() if r} == {t: len(r) for t, r in local.items() if r}
    assert rows == local
    assert len(rows["nodes"]) > 4 * 3  # every question grew a tree, not just a root
    # one engine per worker process, whatever number of shards it expanded
    built = (tmp_path / "built").read_text().split()
    assert len(built) == len(set(built)) and 1 <= len(built) <= 2
    assert str(os.getpid()) not in built


def test_a_worker_killed_mid_shard_leaves_the_uninterrupted_tables(local, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGFACTORY_TEST_STALL", str(tmp_path))
    killed: list[int] = []

    def kill_the_stalled_worker():
        marker = tmp_path / "stalled"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text():
                pid = int(marker.read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_the_stalled_worker, daemon=True)
    killer.start()
    root = tmp_path / "wh"
    summary = build(_config(root, WORKERS), run_id=RUN)
    killer.join(timeout=5)
    assert killed and killed[0] != os.getpid()  # a worker died in the middle of a shard
    assert summary["status"] == "completed" and summary["failed_shards"] == []
    assert _rows(root) == local


def test_the_command_line_build_gives_its_workers_its_own_prefect_server(local, tmp_path):
    """``ragfactory build`` with no Prefect server configured starts one for its process; the
    workers it starts report their task runs there instead of each starting a server."""
    config = _config(tmp_path / "wh", WORKERS).model_dump(mode="json")
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    done = subprocess.run(
        [sys.executable, "-m", "ragfactory.cli", "build", "--config", str(tmp_path / "build.yaml"), "--run-id", RUN],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ephemeral Prefect API server" not in done.stdout + done.stderr
    assert _rows(tmp_path / "wh") == local


def test_a_build_into_an_object_store_killed_and_rerun_elsewhere_leaves_the_local_tables(
    local, tmp_path, s3, monkeypatch
):
    """``ragfactory build`` into ``s3://`` on one worker, killed (build, cluster and all) once a
    shard is committed; rerun from another machine's mirror, it skips what the store holds and
    ends with the local build's tables, each row once, read back through ``ragfactory sql``."""
    uri = s3.bucket("nightly") + "/wh"
    one_worker = {"kind": "dask", "workers": 1, "preload": ["tests.cluster_engine"]}
    (tmp_path / "first.yaml").write_text(yaml.safe_dump(_config(uri, one_worker).model_dump(mode="json")))
    in_process = {"kind": "local", "preload": ["tests.cluster_engine"]}
    (tmp_path / "rerun.yaml").write_text(yaml.safe_dump(_config(uri, in_process).model_dump(mode="json")))
    base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")} | s3.env
    base["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    first_home = tmp_path / "machine-a"
    committed = first_home / "mirrors" / "s3" / "nightly" / "wh" / "nodes" / f"run_id={RUN}" / "*.parquet"
    env = base | {
        "RAGFACTORY_HOME": str(first_home),
        "RAGFACTORY_TEST_STALL": str(tmp_path),
        "RAGFACTORY_TEST_STALL_AFTER": str(committed),
    }
    command = [sys.executable, "-m", "ragfactory.cli", "build", "--run-id", RUN, "--config"]
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(
            [*command, str(tmp_path / "first.yaml")],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline, marker = time.monotonic() + 300, tmp_path / "stalled"
        try:
            while time.monotonic() < deadline and first.poll() is None and not (marker.exists() and marker.read_text()):
                time.sleep(0.2)
        finally:
            with contextlib.suppress(ProcessLookupError):  # ended by itself: the assertion below says how
                os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert marker.exists(), (tmp_path / "first.log").read_text()[-3000:]
    client = s3.client()
    stored = {
        o["Key"]: o["LastModified"]
        for o in client.list_objects_v2(Bucket="nightly")["Contents"]
        if o["Key"].startswith(f"wh/nodes/run_id={RUN}/")
    }
    assert 1 <= len(stored) < 4  # killed mid-way: some shards in the store, not all

    rerun = subprocess.run(
        [*command, str(tmp_path / "rerun.yaml")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=base | {"RAGFACTORY_HOME": str(tmp_path / "machine-b")},
        timeout=500,
    )
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    after = {
        o["Key"]: o["LastModified"]
        for o in client.list_objects_v2(Bucket="nightly")["Contents"]
        if o["Key"].startswith(f"wh/nodes/run_id={RUN}/")
    }
    assert len(after) == 4 and {k: after[k] for k in stored} == stored  # what the store held was not redone

    monkeypatch.setenv("RAGFACTORY_HOME", str(tmp_path / "machine-c"))
    Warehouse(uri).pull()
    assert _rows(uri) == local
    counted = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragfactory.cli",
            "sql",
            "--root",
            uri,
            "--format",
            "csv",
            "select count(*) as n, count(distinct node_id) as ids from nodes",
        ],
        cwd=REPO,
        env=base | {"RAGFACTORY_HOME": str(tmp_path / "laptop")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout == f'"n","ids"\n{len(local["nodes"])},{len(local["nodes"])}\n'
