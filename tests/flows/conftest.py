"""Flow tests: the session's Prefect API server for each (engines are registered by name, see the
``engines`` fixture in tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.fakes import ScriptedBackend
from tests.flows.scripted_policies import decex_hotpotqa


@pytest.fixture(autouse=True)
def _prefect(prefect_api):
    """Every flow test runs against the session's Prefect API server (tests/conftest.py)."""
    yield


@pytest.fixture
def scripted(engines):
    """The scripted DecEx engine of ``scripted_policies.decex_config`` builds, registered for the test."""
    backend = ScriptedBackend(decex_hotpotqa)
    engines(backend)
    return backend
