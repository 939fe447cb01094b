"""Fault injection: small real builds, then damage, interrupts and bad input, as an operator meets them.

Each test states what the user sees (one line naming the thing), the exit code, and the
warehouse afterwards. Flows run against one temporary Prefect API server for the session; a
module that runs no flow in this process overrides ``_prefect`` with a fixture that starts none.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _prefect(prefect_api):
    """Every test here runs against the session's Prefect API server (tests/conftest.py)."""
    yield
