"""Fault injection: small real builds, then damage, interrupts and bad input, as an operator meets them.

Each test states what the user sees (one line naming the thing), the exit code, and the
warehouse afterwards. Flows run against one temporary Prefect API server for the module.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def prefect_harness(tmp_path_factory):
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")  # tasks called alone
    results = tmp_path_factory.mktemp("prefect-results")
    os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(results)
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield
