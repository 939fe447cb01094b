"""The runner section of the build config and a shard lost by its cluster (``flows/runner.py``)."""

from __future__ import annotations

import contextlib
import os
import sys

import pytest
from prefect.states import Completed, Running
from pydantic import ValidationError

from ragfactory.flows.config import BuildConfig, RunnerConfig
from ragfactory.flows.runner import settled_state


def test_the_runner_is_not_in_the_config_hash():
    local = BuildConfig(name="x")
    dask = BuildConfig.model_validate({"name": "x", "runner": {"kind": "dask", "workers": 4}})
    assert local.config_hash() == dask.config_hash()
    assert local.config_hash() != BuildConfig(name="y").config_hash()


def test_an_address_needs_kind_dask():
    with pytest.raises(ValidationError, match="runner.address is set but runner.kind is 'local'"):
        RunnerConfig(address="tcp://127.0.0.1:8786")
    with pytest.raises(ValidationError, match="kind"):
        RunnerConfig(kind="ray")


def test_the_preflight_imports_the_preload_modules_and_names_a_missing_one():
    from ragfactory.tasks.llm.registry import unregister_backend
    from ragfactory.tasks.preflight import preload_problems

    try:
        assert preload_problems(["tests.cluster_engine"]) == []
        assert "tests.cluster_engine" in sys.modules
    finally:
        with contextlib.suppress(ValueError):  # registered by the import: no other test may see it
            unregister_backend("scripted:cluster")
    assert preload_problems(["tests.no_such_module"]) == [
        "runner.preload: cannot import 'tests.no_such_module': No module named 'tests.no_such_module'"
    ]


class LostFuture:
    """A Dask-backed future whose task run never reached a final state: its workers died."""

    task_run_id = None

    def __init__(self, error: BaseException | None, state=None):
        self.state = state or Running()
        self.wrapped_future = self
        self.status = "error" if error else "pending"
        self._error = error
        self.waited = False

    def wait(self):
        self.waited = True

    def exception(self):
        return self._error


class KilledWorker(Exception):
    pass


def test_a_shard_whose_workers_all_died_is_crashed_with_the_clusters_reason():
    future = LostFuture(KilledWorker("Attempted to run task expand-decex-0001 on 4 different workers"))
    state = settled_state(future)
    assert future.waited
    assert state.is_crashed()
    assert state.message == ("shard lost: KilledWorker: Attempted to run task expand-decex-0001 on 4 different workers")


def test_a_settled_shard_keeps_its_state():
    done = Completed(name="Cached")
    assert settled_state(LostFuture(None, done)) is done
    assert settled_state(LostFuture(None)).message == "shard lost: left Running by its runner"


def test_a_temporary_clusters_workers_share_the_cores(monkeypatch):
    from ragfactory.flows.runner import worker_env

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    cores = len(os.sched_getaffinity(0))
    assert worker_env(cores) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    assert worker_env(cores * 3)["OMP_NUM_THREADS"] == "1"  # never 0
    assert worker_env(1)["OMP_NUM_THREADS"] == str(cores)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert worker_env(cores)["OMP_NUM_THREADS"] == "3"


def test_a_preload_package_loaded_from_off_the_path_is_on_it_for_the_cluster_only(tmp_path, monkeypatch):
    """A namespace package pytest's importlib mode loaded without its root on sys.path: the
    spawned workers copy sys.path, so its root must be there while the cluster starts."""
    import types

    from ragfactory.flows.runner import importable_in_workers

    package = types.ModuleType("offpath_suite")
    package.__path__ = [str(tmp_path / "suite" / "offpath_suite")]
    monkeypatch.setitem(sys.modules, "offpath_suite", package)
    before = list(sys.path)
    with importable_in_workers(["offpath_suite.engine", "json"]):
        assert str(tmp_path / "suite") in sys.path
        assert sys.path[: len(before)] == before
    assert sys.path == before
