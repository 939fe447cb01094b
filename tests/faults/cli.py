"""The real CLI in a process of its own with every model hub unreachable, and what an operator
sees of a refused command (``tests/faults/test_preflight.py``, ``test_fast_failures.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ragfactory.warehouse.store import Warehouse

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens, a connection is refused at once


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("ragfactory")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ragfactory.cli"]


def run_cli(args: list[str], cwd: Path, root: Path, timeout_s: float) -> subprocess.CompletedProcess:
    """Run the CLI with the network unreachable and the root and Prefect home under ``cwd``."""
    # the CLI itself must go offline: the test session's own offline settings are not passed on
    env = {
        k: v for k, v in os.environ.items() if k not in {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "RAGFACTORY_ENGINE"}
    }
    env |= {
        "RAGFACTORY_HOME": str(root),
        "PREFECT_HOME": str(cwd / "prefect-home"),
        "HTTPS_PROXY": UNREACHABLE,
        "HTTP_PROXY": UNREACHABLE,
        "https_proxy": UNREACHABLE,
        "http_proxy": UNREACHABLE,
        "HF_ENDPOINT": UNREACHABLE,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "COLUMNS": "400",
    }
    return subprocess.run(_cli() + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("error:")]


def running_runs(root: Path) -> list[str]:
    if not (root / "runs").exists():
        return []
    return [row["run_id"] for row in Warehouse(root).read("runs").to_pylist() if row["status"] == "running"]


def assert_fails_with(done, line: str, root: Path, before_flow: bool = True) -> None:
    """The command failed with exactly ``line`` and no traceback, leaving no run marked running;
    ``before_flow``: refused before any work, so no Prefect server was started (how fast that is
    is a benchmark's business, never a test's)."""
    screen = done.stdout + done.stderr
    assert done.returncode == 1, screen
    if before_flow:
        assert "Starting temporary server" not in screen, screen
    assert error_lines(done) == [line], screen
    assert "Traceback" not in screen
    assert running_runs(root) == []
