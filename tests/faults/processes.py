"""Real `ragfactory build` processes for the fault tests: a small build's config, its start in a
process of its own (the user's shell environment: no Prefect API or home), and the wait until it
is mid-shard on an engine call (``tests/faults/test_run_states.py``, ``test_children.py``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml

from ragfactory.warehouse.store import Warehouse

REPO = Path(__file__).resolve().parents[2]  # `python -m tests.echo_server` runs from here
START_WITHIN_S = 300  # a build's Prefect server migrates a fresh database: slow on 2 busy cores


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def shell_env() -> dict[str, str]:
    """The test's environment without a Prefect API or home, as a user's shell would have."""
    return {k: v for k, v in os.environ.items() if k not in {"PREFECT_API_URL", "PREFECT_HOME"}}


def build_config(tmp_path: Path, **extra) -> Path:
    """A small build: Bamboogle (no passages, so no index) and no search unless ``extra`` says."""
    data = {
        "name": "faults",
        "datasets": [{"name": "bamboogle", "limit": 4}],
        "partitions": {"eval_only": []},
        "corpus": {"from_datasets": True},
        "retrieval": {"dense": {"enabled": False}},
        "search": {"strategies": []},
    } | extra
    path = tmp_path / "build.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_build(config: Path, root: Path, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ragfactory.cli", "build", "--config", str(config), "--root", str(root)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=shell_env(),
        )


def start_cli(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``ragfactory <args>`` in a process of its own, its output in ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ragfactory.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=shell_env() | (env or {}),
        )


def sigterm_once_recorded(command: subprocess.Popen, root: Path, log: Path, exit_within_s: float) -> list:
    """SIGTERM ``command`` a few seconds after it recorded its run in ``root``, and check that it
    exits 143 within ``exit_within_s``; returns the processes it had started."""
    try:
        deadline = time.monotonic() + START_WITHIN_S
        while not (root / "runs").exists() or Warehouse(root).read("runs").num_rows == 0:
            assert command.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the command never recorded its run"
            time.sleep(0.5)
        time.sleep(3)  # into its work
        children = psutil.Process(command.pid).children(recursive=True)
        sent = time.monotonic()
        command.send_signal(signal.SIGTERM)
        assert command.wait(timeout=exit_within_s) == 143
        assert time.monotonic() - sent <= exit_within_s
    finally:
        if command.poll() is None:
            command.kill()
    return children


def wait_for_engine_call(build: subprocess.Popen, port: int) -> None:
    """Until the build holds a connection to the engine (it is mid-shard), or fail."""
    process = psutil.Process(build.pid)
    deadline = time.monotonic() + START_WITHIN_S
    while time.monotonic() < deadline:
        assert build.poll() is None, f"the build ended first (exit {build.returncode})"
        if any(c.raddr and c.raddr.port == port for c in process.net_connections(kind="tcp")):
            return
        time.sleep(0.5)
    raise AssertionError(f"no engine call within {START_WITHIN_S} s")


def alive_pids(pids: list[int]) -> list[int]:
    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return [pid for pid in pids if alive(pid)]


def start_mid_shard_build(tmp_path: Path, port: int) -> tuple[subprocess.Popen, Path, Path]:
    """A DecEx build on the slow echo engine at ``port``, once it is mid-shard; (process, root, log)."""
    policy = {"backend": "openai", "model": "echo", "base_url": f"http://127.0.0.1:{port}/v1", "retries": 0}
    config = build_config(
        tmp_path,
        datasets=[{"name": "hotpotqa", "limit": 10}],
        llm={"policy": policy},
        search={
            "strategies": ["decex"],
            "partition": "train",
            "questions_per_dataset": 2,
            "decex": {"k": 2, "n_rollouts": 1, "t_max": 1, "termination_samples": 1},
        },
    )
    root, log = tmp_path / "wh", tmp_path / "build.log"
    build = start_build(config, root, log)
    try:
        wait_for_engine_call(build, port)
    except BaseException:
        build.kill()
        raise
    return build, root, log
