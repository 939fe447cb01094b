"""Which runs a live process holds: one ``flock``'d lock file per run, ``<root>/_runs/<run_id>.lock``.

A ``runs`` row says ``running`` only while a process holds its run's lock. Why a lock file and not
a heartbeat: the kernel drops an ``flock`` the moment its process ends, however it ends (exit,
exception, SIGKILL, OOM), so "is anyone running this?" has an exact answer at once, with no
interval to tune, no clock to trust and no writer thread to keep alive; a heartbeat would answer
"maybe dead" only after a timeout and needs a write per beat. The file keeps the holder's pid,
host and start time (JSON) for the messages that name who holds, or last held, a run. Linux
emulates ``flock`` on NFS with byte-range locks, so a shared root works across hosts too.

Lock files are never deleted (deleting one another process has open would let two processes
"hold" the same run); each is a few dozen bytes. ``_runs`` starts with ``_`` so table readers and
``ragfactory check`` skip it, as they skip ``_manifest``. Plain Python: no Prefect.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from ragfactory.warehouse.store import safe_name

LOCK_DIR = "_runs"


class RunBusy(RuntimeError):
    """Another live process holds the run (two builds of one run id at once)."""


def lock_path(root: Path, run_id: str) -> Path:
    return Path(root) / LOCK_DIR / f"{safe_name(run_id)}.lock"


def open_lock(path: Path) -> int:
    """A descriptor on the lock file (created when missing); raises OSError on a read-only root."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def try_lock(fd: int) -> bool:
    """Take the exclusive lock without waiting; False when a live process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock_within(fd: int, wait_s: float, poll_s: float = 0.1) -> bool:
    """Take the lock, waiting up to ``wait_s`` (a process marking stale runs holds it briefly)."""
    deadline = time.monotonic() + wait_s
    while not try_lock(fd):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def write_holder(fd: int, **about: str) -> dict:
    """Record this process as the holder: pid, host, start time (UTC, ISO 8601), and ``about``
    what it holds."""
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **about,
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)
    return holder


def read_holder(fd: int) -> dict:
    """The holder the lock file names ({} when it names none or is unreadable)."""
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}


def describe(holder: dict) -> str:
    """``pid 123 on host-a since 2026-11-23T16:00:00+00:00``, or ``an unknown process``."""
    if not holder:
        return "an unknown process"
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started_at')}"
