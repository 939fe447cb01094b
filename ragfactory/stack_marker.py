"""Which Prefect server serves a warehouse: the marker ``ragfactory serve`` leaves in its root.

A command that runs a flow (build, evaluate, train, repair) against a warehouse would otherwise
run it on a temporary Prefect server of its own, whose history ends with the command: the stack's
UI never shows it. ``serve`` writes ``<root>/_stack.json`` (its API address and its pid) once the
stack is up and removes it when it stops; a command on the same root reports to that server while
the marker's process is alive and the server answers, and falls back to a temporary server
otherwise (a marker left by a killed ``serve`` is ignored, never trusted). A configured
``PREFECT_API_URL`` always wins. Keyed by root, not per user: two stacks on two warehouses, or a
test's stack beside other tests' warehouses, never capture each other's runs.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import psutil

MARKER = "_stack.json"


def write_marker(root: str | Path, api_url: str) -> Path:
    path = Path(root) / MARKER
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"api_url": api_url, "pid": os.getpid()}), encoding="utf-8")
    return path


def remove_marker(root: str | Path) -> None:
    """Remove the marker if this process wrote it (a second ``serve`` may have replaced it)."""
    path = Path(root) / MARKER
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def running_stack_api(root: str | Path, timeout: float = 2.0) -> str | None:
    """The API address of the live stack serving ``root``, else None."""
    try:
        marker = json.loads((Path(root) / MARKER).read_text(encoding="utf-8"))
        api_url, pid = str(marker["api_url"]), int(marker["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not psutil.pid_exists(pid):
        return None
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout) as answer:
            return api_url if answer.status == 200 else None
    except OSError:
        return None
