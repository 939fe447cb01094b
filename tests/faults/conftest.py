"""Fault injection: small real builds, then damage, interrupts and bad input, as an operator meets them.

Each test states what the user sees (one line naming the thing), the exit code, and the
warehouse afterwards. Flows run against one temporary Prefect API server for the session; a
module that runs no flow in this process says so with ``NEEDS_PREFECT = False`` and starts none.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _prefect(request):
    """Every test here runs against the session's Prefect API server (tests/conftest.py), unless
    its module runs no flow in this process."""
    if getattr(request.module, "NEEDS_PREFECT", True):
        request.getfixturevalue("prefect_api")
    yield
