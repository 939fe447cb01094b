"""Children in process groups of their own: started out of reach of the terminal's Ctrl-C, stopped whole.

``ragfactory serve`` starts its Prefect server, workers and dashboard here. Every child starts
in its own process group, so a Ctrl-C in the terminal reaches only the command, which then
stops the children (and the flow runs they started) itself: SIGTERM to the group, SIGKILL to
what is left after a grace period. A SIGKILLed command leaves none behind either: each child
dies with it (``die_with_parent``, ragfactory/watchdog.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import IO

from ragfactory.watchdog import die_with_parent


def spawn(args: list[str], env: dict[str, str], log: Path | None, cwd: Path) -> subprocess.Popen:
    """Start ``args`` as the leader of a new process group; its output is appended to ``log``
    (None: this terminal)."""
    out: IO | int | None = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        out = log.open("ab")
    try:
        return subprocess.Popen(
            args,
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )  # a SIGKILLed `serve` leaves no server
    finally:
        if out is not None:
            out.close()  # the child holds its own descriptor


def stop(process: subprocess.Popen, grace: float = 20.0) -> int | None:
    """SIGTERM the process's group, SIGKILL it after ``grace`` seconds; returns the exit code."""
    if process.poll() is not None:
        _signal_group(process, signal.SIGKILL)  # children it may have left behind
        return process.returncode
    _signal_group(process, signal.SIGTERM)
    try:
        return process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        return process.wait(timeout=30)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)  # start_new_session made the child its group's leader
    except ProcessLookupError:
        pass
