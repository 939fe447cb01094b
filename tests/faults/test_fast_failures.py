"""Failures in seconds: what each command reads is checked before Prefect starts.

Five requests that once started a temporary Prefect server and a flow before failing (one and a
half to two minutes each on a busy machine): training on a build that exported nothing for the
method, training on a run that does not exist, evaluating a dataset the warehouse never
ingested, repairing a run whose recorded config no longer runs here, and serving on a port in
use. Each is now refused by its preflight: exit 1, one ``error:`` line naming the field and the
fix, and nothing started or moved. The real CLI runs in a subprocess with the network
unreachable (``tests/faults/cli.py``).

"In seconds" is held as CPU time: the command and everything it waited for (a Prefect server
it started and stopped included) spend under ``FAST_S`` seconds of CPU, the imports being most of
it. CPU time, not the wall clock, because on a shared two-core machine the same command takes
from 6 to 20 s of wall time; the wall clock only bounds a hang (``HANG_S``).
"""

from __future__ import annotations

import json
import resource
import socket

import pytest

from ragfactory.warehouse.integrity import check
from ragfactory.warehouse.store import Warehouse
from tests.faults import cli
from tests.faults.cli import assert_fails_with
from tests.warehouse.filled import rows

pytestmark = pytest.mark.subprocess  # every test runs the CLI in a process of its own

FAST_S = 15.0  # CPU seconds a refused command may spend
HANG_S = 120.0  # wall-clock seconds after which a command counts as hung


def run_cli(args: list[str], cwd, root, limit_s: float):
    """``tests/faults/cli.py`` ``run_cli``, with the CPU seconds the command spent instead of its wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = cli.run_cli(args, cwd, root, HANG_S)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def assert_cpu_within(cpu_s: float) -> None:
    assert cpu_s <= FAST_S, f"spent {cpu_s:.1f} s of CPU, more than {FAST_S} s"


def _warehouse_with_a_build(root, config: dict) -> Warehouse:
    """A warehouse holding build run r1 (its runs row records ``config``) and its nodes shard,
    but no export of any method."""
    wh = Warehouse(root)
    run = rows("runs")[0] | {"flow": "build", "status": "completed", "config": json.dumps(config)}
    wh.write("runs", [run], shard="run")
    wh.write("nodes", rows("nodes"), shard="decex-0000")
    return wh


def test_training_on_a_build_without_that_export_fails_fast(tmp_path):
    root = tmp_path / "wh"
    _warehouse_with_a_build(root, {"name": "r"})
    done, elapsed = run_cli(["train", "--method", "sft", "--run-id", "r1"], tmp_path, root, FAST_S)
    assert_cpu_within(elapsed)
    assert_fails_with(
        done,
        (
            "error: run_id: run 'r1' exported no sft_examples rows, which --method sft trains on; build with a "
            "strategy that exports them, or give --parquet"
        ),
        root,
    )
    assert "Starting temporary server" not in done.stdout + done.stderr


def test_training_on_a_run_that_does_not_exist_fails_fast(tmp_path):
    root = tmp_path / "wh"
    done, elapsed = run_cli(["train", "--method", "dpo", "--run-id", "no-such-run"], tmp_path, root, FAST_S)
    assert_cpu_within(elapsed)
    assert_fails_with(
        done,
        (
            f"error: run_id: no run 'no-such-run' in {root}; list the builds with "
            "`ragfactory sql \"select run_id, status from runs where flow = 'build'\"`"
        ),
        root,
    )


def test_evaluating_a_dataset_never_ingested_fails_fast(tmp_path):
    root = tmp_path / "wh"
    done, elapsed = run_cli(
        ["evaluate", "--dataset", "nosuchds", "--limit", "1", "--mode", "direct"], tmp_path, root, FAST_S
    )
    assert_cpu_within(elapsed)
    assert_fails_with(
        done,
        (
            f"error: datasets[0]: no questions of 'nosuchds' in {root}: build them first (`ragfactory build`), or "
            "name a bundled dataset: 2wikimultihopqa, bamboogle, hotpotqa, musique"
        ),
        root,
    )
    assert not (root / "runs").exists()


def test_a_repair_whose_run_cannot_run_here_moves_nothing_and_fails_fast(tmp_path):
    root = tmp_path / "wh"
    gone = tmp_path / "gone.jsonl"
    wh = _warehouse_with_a_build(root, {"name": "r", "datasets": [{"name": "mine", "path": str(gone)}]})
    shard = root / "nodes" / "run_id=r1" / "decex-0000.parquet"
    shard.write_bytes(shard.read_bytes()[:100])
    done, elapsed = run_cli(["check", "--repair"], tmp_path, root, FAST_S)
    assert_cpu_within(elapsed)
    assert_fails_with(
        done,
        (
            f"error: nothing was moved: cannot rebuild: run r1: datasets[0].path: {gone} does not exist; fix the "
            f"path (a relative path is read from {tmp_path})"
        ),
        root,
    )
    assert not (root / "_quarantine").exists() and shard.stat().st_size == 100
    assert [(p.kind, p.path) for p in check(wh)] == [("damaged", "nodes/run_id=r1/decex-0000.parquet")]


def test_serving_on_a_port_in_use_fails_fast(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done, elapsed = run_cli(
            ["serve", "--port", str(port), "--dashboard-port", "0"], tmp_path, tmp_path / "wh", FAST_S
        )
    assert_cpu_within(elapsed)
    assert_fails_with(
        done, (f"error: 127.0.0.1:{port} is in use (another Prefect server?); pick one with --port"), tmp_path / "wh"
    )


@pytest.fixture(autouse=True)
def _prefect():
    """Overrides the folder's: this module runs no flow in this process, so no Prefect server."""
    yield
