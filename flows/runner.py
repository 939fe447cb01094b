"""Where a build's expansion shards run: in the flow's process, or on a Dask cluster.

``runner.kind`` in the build config picks one (``flows/config.py`` ``RunnerConfig``):

- ``local`` (default): each shard is submitted to the flow's own task runner, a thread pool,
  ``search.max_concurrent_shards`` at a time; they share the process's engine, whose scheduler
  puts the requests of different shards in the same engine calls (``tasks/llm/scheduler.py``).
- ``dask``: each shard is a Prefect task run on a Dask cluster through prefect-dask's
  ``DaskTaskRunner``: the cluster at ``runner.address``, or a temporary local one of
  ``runner.workers`` processes started for the stage and closed after it. Every shard is
  submitted at once and the scheduler hands them to free workers. A worker process builds its
  engine on its first shard and keeps it for the next ones (``tasks/llm/engine.py``: one engine
  per process); its threads (``runner.threads_per_worker``) share it as local shards do.

The shard task, its parameters, its cache key and its result storage are the same on both, so
the tables, call ids and cache hits are too: a build's rows do not depend on where its shards
ran, and ``runner`` is not in the config hash. When a worker dies mid-shard, Dask runs the
shard again on another worker (``distributed.scheduler.allowed-failures``, 3 by default); the
shard task rewrites every file of its shard, so the rerun leaves what an uninterrupted one would.

When to use it: on several machines, or several GPUs each with its own engine. On one machine
the local runner is faster, since its shards' calls merge into one engine's batches where each
worker runs its own engine (``benchmarks/scaling.py``: 8 shards on 2 cores, 7.7 shards/min
local, 3.5 on one worker, 5.6 on two).

Why Dask and not Ray: a Dask cluster is pure Python (about 5 MB installed, no native server),
starts two local workers in seconds on a laptop, and runs Prefect tasks through prefect-dask
with the same futures as the local runner; Ray's wheel alone is over 60 MB and its local
cluster needs a GCS server and a raylet. Work-pool workers (one shard per flow run) would add a
flow run per shard and need a deployment per build.

Blind spots: the warehouse root and the result storage must be ones every worker can reach
(the same machine, a shared file system, or an object store: ``warehouse.objectstore``); the workers of a cluster at an address need
``PREFECT_API_URL`` in their environment (a temporary cluster is given this process's) and the
``runner.preload`` modules (``dask worker --preload``), since an engine or retriever registration
lives in the process that made it; and a shard's progress bar is drawn by its worker, not by the
flow's terminal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from prefect import Task
from prefect.futures import PrefectFuture
from prefect.states import Crashed, State

from ragfactory.flows.config import RunnerConfig
from ragfactory.tasks.retry import failure_reason

Submit = Callable[[Task, dict[str, Any]], PrefectFuture]
J = TypeVar("J")


def run_bounded(
    jobs: Iterable[J], submit: Callable[[J], PrefectFuture], limit: int | None
) -> list[tuple[J, PrefectFuture]]:
    """Each job with its future, in job order, at most ``limit`` running at once (None: all at
    once). A slot is given back by the future's own done callback (a thread's or a Dask
    cluster's future), so nothing polls; ``settle`` waits for the last ones."""
    slots = threading.BoundedSemaphore(limit) if limit else None
    submitted = []
    for job in jobs:
        if slots is not None:
            slots.acquire()
        future = submit(job)
        if slots is not None:
            future.add_done_callback(lambda _: slots.release())
        submitted.append((job, future))
    return submitted


def settle(
    futures: Iterable[tuple[str, PrefectFuture]], errors: dict[str, str]
) -> tuple[list[tuple[Any, State]], list[str]]:
    """Once each named future has finished: (the result and final state of each that completed,
    the names of those that failed), each failure's reason in ``errors`` under its name."""
    done, failed = [], []
    for name, future in futures:
        state = settled_state(future)
        if state.is_completed():
            done.append((future.result(), state))
        else:
            failed.append(name)
            errors[name] = failure_reason(name, state)
    return done, failed


@contextlib.contextmanager
def shard_runner(runner: RunnerConfig, max_concurrent_shards: int) -> Iterator[tuple[Submit, int | None]]:
    """(submit a task with its parameters, how many shards to keep in flight, None for all at
    once) for the block; a temporary Dask cluster lives as long as the block."""
    if runner.kind == "local":
        yield (lambda task, parameters: task.submit(**parameters)), max_concurrent_shards
        return
    with importable_in_workers(runner.preload), dask_task_runner(runner) as task_runner:
        yield task_runner.submit, None


def dask_task_runner(config: RunnerConfig):
    """prefect-dask's task runner for ``config``: the cluster at its address, or a temporary
    local cluster whose scheduler and workers listen on 127.0.0.1 only."""
    from prefect_dask import DaskTaskRunner  # imported only by a build that names it

    if config.address:
        return DaskTaskRunner(address=config.address)
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": config.workers,
            "threads_per_worker": config.threads_per_worker,
            "processes": True,
            "host": "127.0.0.1",
            "dashboard_address": None,
            "silence_logs": logging.ERROR,  # not the cluster's start and close, line by line, in the build's log
            "preload": list(config.preload),
            "env": {**worker_env(config.workers), **prefect_env()},
        }
    )


@contextlib.contextmanager
def importable_in_workers(preload: list[str]) -> Iterator[None]:
    """The folder each ``runner.preload`` module's top package was loaded from put on
    ``sys.path`` for the block (the preflight has imported them), so that a temporary cluster's
    worker process imports them as the build did: Dask spawns workers, and a spawned process
    starts with its parent's ``sys.path``. A package found otherwise than through ``sys.path``
    (a test suite's root under pytest's importlib mode, a path hook) would not be found there.
    Restored afterwards."""
    before = list(sys.path)
    sys.path.extend(root for name in preload for root in _loaded_from(name.partition(".")[0]) if root not in sys.path)
    try:
        yield
    finally:
        sys.path[:] = before


def _loaded_from(top: str) -> list[str]:
    """The folders that hold the already imported top-level module or package ``top``."""
    module = sys.modules.get(top)
    if module is None:
        return []
    if hasattr(module, "__path__"):  # a package, namespace packages included
        return [os.path.dirname(os.path.abspath(p)) for p in module.__path__]
    file = getattr(module, "__file__", None)
    return [os.path.dirname(os.path.abspath(file))] if file else []


def prefect_env() -> dict[str, str]:
    """The Prefect API this process talks to, for workers it starts: without it a worker would
    start an ephemeral server of its own and its task runs would land there (a build run from
    the command line, with no server configured, uses one started for this process alone). A
    cluster at an address must have ``PREFECT_API_URL`` in its workers' environment already."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return {"PREFECT_API_URL": str(client.api_url).rstrip("/")}


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def worker_env(workers: int) -> dict[str, str]:
    """The environment of ``workers`` processes sharing this machine (a temporary cluster's
    workers, the test suite's): the cores this process may run on shared out among them (torch
    and BLAS size their thread pools from these variables), so that four workers on four cores
    run four single-threaded engines rather than sixteen threads fighting over four cores. A
    value already set in the environment wins."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = max(1, cores // workers)
    return {name: os.environ.get(name, str(threads)) for name in THREAD_VARIABLES}


def settled_state(future: PrefectFuture) -> State:
    """The final state of a submitted shard, once it has one. A task run that never reached one
    (its Dask workers died ``allowed-failures`` times: ``KilledWorker``) is Crashed, with the
    cluster's reason as its message."""
    future.wait()
    state = future.state
    if state.is_final():
        return state
    wrapped = getattr(future, "wrapped_future", None)
    error = wrapped.exception() if wrapped is not None and wrapped.status == "error" else None
    reason = f"{type(error).__name__}: {error}" if error else f"left {state.name} by its runner"
    return Crashed(message=f"shard lost: {reason}")
