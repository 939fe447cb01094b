"""Flow tests: the session's Prefect API server for each (engines are registered by name, see the
``engines`` fixture in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _prefect(prefect_api):
    """Every flow test runs against the session's Prefect API server (tests/conftest.py)."""
    yield
