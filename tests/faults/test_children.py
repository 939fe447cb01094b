"""Processes a command starts die with it, even when it is SIGKILLed (the OOM killer, ``kill -9``).

- A process that started the watchdog (``ragfactory/watchdog.py``), a child of its own and a
  temporary Prefect home, then SIGKILLs itself: within ``GONE_WITHIN_S`` the child is gone and
  the home removed.
- A child spawned with ``die_with_parent`` (``ragfactory serve``'s server, workers, dashboard)
  gets SIGKILL from the kernel when its parent dies.
- A temporary Prefect home whose command is dead is removed when the next command starts.
- A real `ragfactory build` killed with SIGKILL mid-shard (slow: it starts Prefect's temporary
  server): every process it started is gone within ``GONE_WITHIN_S``, its Prefect home too, and
  its flow ran under the settings the command set (its log's ``prefect settings`` line).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from ragfactory.watchdog import HOME_PREFIX, homes_of, remove_stale_homes
from tests.faults.processes import alive_pids, start_mid_shard_build

GONE_WITHIN_S = 10.0

ORPHANING = textwrap.dedent("""
    import os, signal, subprocess, sys, tempfile
    from ragfactory.watchdog import HOME_PREFIX, die_with_parent, start_watchdog
    if sys.argv[1] == "watchdog":
        start_watchdog()
        home = tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{os.getpid()}-")
        child = subprocess.Popen(["sleep", "300"])
    else:
        home = ""
        child = subprocess.Popen(["sleep", "300"], preexec_fn=die_with_parent)
    print(child.pid, home, flush=True)
    if sys.argv[1] == "watchdog":
        import time; time.sleep(1.5)  # the watchdog notes its descendants every half second
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _gone_within(pids: list[int], paths: list[Path], limit_s: float) -> tuple[list[int], list[Path]]:
    """The pids still alive and the paths still there after waiting up to ``limit_s`` for them."""
    deadline = time.monotonic() + limit_s
    while (alive_pids(pids) or any(p.exists() for p in paths)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive_pids(pids), [p for p in paths if p.exists()]


@pytest.mark.parametrize("how", ["watchdog", "pdeathsig"])
@pytest.mark.subprocess
def test_a_sigkilled_process_leaves_no_child_and_no_prefect_home(how):
    done = subprocess.run([sys.executable, "-c", ORPHANING, how], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    pid, _, home = done.stdout.strip().partition(" ")
    paths = [Path(home)] if home else []
    assert _gone_within([int(pid)], paths, GONE_WITHIN_S) == ([], [])


@pytest.mark.subprocess
def test_a_prefect_home_whose_command_is_gone_is_removed_at_the_next_start():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = Path(tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{dead.pid}-"))
    live = Path(tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{os.getpid()}-"))
    unnamed = Path(tempfile.mkdtemp(prefix=HOME_PREFIX))  # an older name, without its owner: left alone
    try:
        removed = remove_stale_homes()
        assert stale in removed and not stale.exists()
        assert live.is_dir() and unnamed.is_dir()
    finally:
        for path in (stale, live, unnamed):
            shutil.rmtree(path, ignore_errors=True)


def test_kill_9_of_a_build_leaves_no_process_it_started(tmp_path, slow_engine):
    build, root, _ = start_mid_shard_build(tmp_path, slow_engine)
    try:
        children = [c.pid for c in psutil.Process(build.pid).children(recursive=True)]
        [home] = homes_of(build.pid)
        assert len(children) >= 2, "the build should have started Prefect's server and its watchdog"
        build.kill()
        assert build.wait(timeout=30) == -signal.SIGKILL
    finally:
        if build.poll() is None:
            build.kill()
    assert _gone_within(children, [home], GONE_WITHIN_S) == ([], [])
    [settings] = [
        line
        for path in (root / "logs").glob("build-*.log")
        for line in path.read_text().splitlines()
        if "prefect settings:" in line
    ]
    assert f"prefect settings: home={home} server_startup_timeout_s=180" in settings


@pytest.fixture(autouse=True)
def _prefect():
    """Overrides the folder's: this module runs no flow in this process, so no Prefect server."""
    yield
