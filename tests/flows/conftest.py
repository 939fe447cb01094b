"""Flow tests: the session's Prefect API server for each, and the engine seam's test double."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _prefect(prefect_api):
    """Every flow test runs against the session's Prefect API server (tests/conftest.py)."""
    yield


def use_engine(monkeypatch, backend) -> None:
    """Make the expand tasks build their batcher over ``backend`` (a test double) for every role."""
    from ragfactory.tasks import expand as expand_module
    from ragfactory.tasks.llm import engine

    def make_batcher(llm, cache, cache_dir=None, backends=None):
        return engine.make_batcher(llm, cache, cache_dir, backends={"policy": backend, "judge": backend})

    monkeypatch.setattr(expand_module, "make_batcher", make_batcher)
