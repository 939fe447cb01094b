"""Shared fixtures: an isolated warehouse root per test, and offline model settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The embedded model is converted once into the checkout's pytest cache, never into ~/.cache;
# every warehouse root a test (or a worker it starts) makes links its files from there.
os.environ.setdefault(
    "RAGFACTORY_MODEL_CACHE", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "ragfactory-model-cache")
)


@pytest.fixture
def warehouse(tmp_path, monkeypatch):
    from ragfactory.warehouse.store import Warehouse

    root = tmp_path / "warehouse"
    monkeypatch.setenv("RAGFACTORY_HOME", str(root))
    return Warehouse(root)


@pytest.fixture(scope="session")
def embedded_model(request, tmp_path_factory):
    """The embedded SmolLM2 checkpoint, converted once and kept in pytest's cache folder."""
    from ragfactory.tasks.llm.embedded import embedded_model_path

    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("ragfactory-models") if cache else tmp_path_factory.mktemp("models")
    return embedded_model_path(folder)
