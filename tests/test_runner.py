"""The runner section of the build config and a shard lost by its cluster (``flows/runner.py``)."""

from __future__ import annotations

import os

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
    from ragfactory.tasks.llm.registry import backend_entry
    from ragfactory.tasks.preflight import preload_problems

    assert preload_problems(["tests.cluster_engine"]) == []
    assert backend_entry("scripted:cluster").shared
    assert preload_problems(["tests.no_such_module"]) == [
        "runner.preload: cannot import 'tests.no_such_module': No module named 'tests.no_such_module'"]


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
    assert state.message == ("shard lost: KilledWorker: Attempted to run task expand-decex-0001 "
                             "on 4 different workers")


def test_a_settled_shard_keeps_its_state():
    done = Completed(name="Cached")
    assert settled_state(LostFuture(None, done)) is done
    assert settled_state(LostFuture(None)).message == "shard lost: left Running by its runner"


def test_a_temporary_clusters_workers_share_the_cores(monkeypatch):
    from ragfactory.flows.runner import worker_env

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    cores = os.cpu_count() or 1
    assert worker_env(cores) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert worker_env(cores * 3)["OMP_NUM_THREADS"] == "1"  # never 0
    assert worker_env(1)["OMP_NUM_THREADS"] == str(cores)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert worker_env(cores)["OMP_NUM_THREADS"] == "3"
