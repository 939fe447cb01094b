"""The five-strategy build the browser tests read (tests/dashboard/built.py), once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def five_strategies(tmp_path_factory, prefect_api):
    """The warehouse root of one scripted build of DecEx, TreePS, MCTS, R3 and APEX."""
    from tests.dashboard.built import build_five

    root = tmp_path_factory.mktemp("five") / "warehouse"
    build_five(root)
    return root
