"""Fault injection: small real builds, then damage, interrupts and bad input, as an operator meets them.

Each test states what the user sees (one line naming the thing), the exit code, and the
warehouse afterwards. Flows run against one temporary Prefect API server for the session; a
module that runs no flow in this process overrides ``_prefect`` with a fixture that starts none.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from tests.faults.processes import REPO, free_port


@pytest.fixture(autouse=True)
def _prefect(prefect_api):
    """Every test here runs against the session's Prefect API server (tests/conftest.py)."""
    yield


@pytest.fixture(scope="module")
def slow_engine():
    """The echo server answering after 300 s: an engine call a signal always interrupts."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.echo_server", "--model", "echo", "--port", str(port), "--delay-s", "300"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    yield port
    server.kill()  # a graceful stop would wait out the 300 s answers still pending
    server.wait(timeout=10)
