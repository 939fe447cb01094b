"""Children that die with their command, even when the command is SIGKILLed.

A command that runs flows starts processes it does not spawn itself: Prefect launches its
temporary API server, an engine may launch its own server. A SIGTERM or Ctrl-C reaches the
command, which stops them (``ragfactory/local_flows.py``); SIGKILL (the kernel's OOM killer, a
``kill -9``) reaches the command alone, and its children would go on serving for hours.

Two parts, both Linux-first and harmless elsewhere:

- ``die_with_parent`` is a ``preexec_fn`` for the children this project spawns itself
  (``ragfactory serve``'s server, workers and dashboard): the kernel sends them SIGKILL when the
  thread that started them ends (``prctl(PR_SET_PDEATHSIG)``).
- ``start_watchdog`` starts a small process (``python -m ragfactory.watchdog <pid>``) in its
  own session, for the children spawned by libraries: every half second it notes the command's
  descendants; once the command is gone, it sends those still alive (the same processes: pid and
  start time) SIGTERM, SIGKILL two seconds later, removes the command's temporary Prefect homes
  (``ragfactory-prefect-<pid>-*``) and exits. It holds no file the command writes.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HOME_PREFIX = "ragfactory-prefect-"  # a command's temporary Prefect home: <prefix><pid>-<random>
POLL_S = 0.5  # how often the watchdog looks: a dead command's children go within a second or two
GRACE_S = 2.0  # between SIGTERM and SIGKILL, for a server to close its database
_PR_SET_PDEATHSIG = 1  # linux/prctl.h

_started: subprocess.Popen | None = None


def die_with_parent() -> None:
    """``preexec_fn``: ask the kernel for SIGKILL when the spawning thread ends (Linux only)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def start_watchdog() -> subprocess.Popen:
    """The watchdog of this process (started once per process)."""
    global _started
    if _started is None or _started.poll() is not None:
        _started = subprocess.Popen(
            [sys.executable, "-m", "ragfactory.watchdog", str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )  # its own session: a Ctrl-C is the command's
    return _started


def homes_of(pid: int) -> list[Path]:
    """The temporary Prefect homes that process ``pid`` made."""
    return sorted(Path(tempfile.gettempdir()).glob(f"{HOME_PREFIX}{pid}-*"))


def remove_stale_homes() -> list[Path]:
    """Remove the temporary Prefect homes whose command is gone (a SIGKILL before the watchdog
    could, or a watchdog killed too); returns what was removed."""
    removed = []
    for home in Path(tempfile.gettempdir()).glob(f"{HOME_PREFIX}*-*"):
        owner = home.name[len(HOME_PREFIX) :].partition("-")[0]
        if not owner.isdigit() or _alive_since(int(owner), home):
            continue
        shutil.rmtree(home, ignore_errors=True)
        removed.append(home)
    return removed


def _alive_since(pid: int, home: Path) -> bool:
    """Whether ``pid`` runs and started before ``home`` was made (a reused pid did not)."""
    try:
        return psutil.Process(pid).create_time() <= home.stat().st_mtime + 1
    except (psutil.NoSuchProcess, OSError):
        return False


def _descendants(pid: int) -> dict[int, float]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return {}
    found = {}
    for child in children:
        try:
            found[child.pid] = child.create_time()
        except psutil.NoSuchProcess:
            pass
    return found


def _still_ours(known: dict[int, float]) -> list[psutil.Process]:
    """The noted processes still alive (same pid, same start), and their own descendants."""
    alive = []
    for pid, created in known.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == created:
                alive += [process, *process.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return alive


def end_processes(processes: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM each process, then SIGKILL those still alive after ``grace_s``."""
    for process in processes:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def watch(parent: int) -> None:
    """Follow ``parent`` until it ends; then end what it started and remove its Prefect homes."""
    me, known = os.getpid(), {}
    while _running(parent):
        known.update(_descendants(parent))
        known.pop(me, None)
        time.sleep(POLL_S)
    end_processes(_still_ours(known), GRACE_S)
    for home in homes_of(parent):
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        watch(int(sys.argv[1]))
    except psutil.Error:
        pass
