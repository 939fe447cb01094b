"""The scripted DecEx engine of the distributed-build tests, registered on import.

A Dask worker imports this module when it starts (``runner.preload``), as a deployment's worker
imports the module that registers its plugged engine; the test process registers it too, for
the length of the distributed tests only (``register``), so the local build of the same config
uses the same engine and no other test sees it. Registered like a real engine (shared: one
per process, behind the coalescing pool), so a worker builds it once whatever number of shards
it expands.

Two switches, read from the environment a worker inherits:

- ``RAGFACTORY_TEST_ENGINE_LOG``: a folder; each construction appends ``<pid>`` to ``built``.
- ``RAGFACTORY_TEST_STALL``: a folder; the first engine call of the whole cluster claims
  ``stalled`` (exclusive create), writes its process id there and waits, so that a test can kill
  that worker mid-shard. With ``RAGFACTORY_TEST_STALL_AFTER`` (a glob pattern) too, the first
  call made once a file matches it: a build killed after some shards were committed.
"""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path

from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.llm.registry import register_backend
from tests.fakes import ScriptedBackend
from tests.flows.scripted_policies import decex_policy

ENGINE = "scripted:cluster"
GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=4).questions}


class StallingBackend(ScriptedBackend):
    """The scripted DecEx policy; the cluster's first call may stall until its worker is killed."""

    def generate_batch(self, requests):
        stall = os.environ.get("RAGFACTORY_TEST_STALL")
        after = os.environ.get("RAGFACTORY_TEST_STALL_AFTER")
        if stall and (not after or glob.glob(after)):
            try:
                fd = os.open(Path(stall) / "stalled", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                time.sleep(600)  # killed long before
        return super().generate_batch(requests)


def _build(role, cache_dir):
    if log := os.environ.get("RAGFACTORY_TEST_ENGINE_LOG"):
        with open(Path(log) / "built", "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")
    return StallingBackend(decex_policy(GOLD))


def register() -> None:
    register_backend(ENGINE, _build, replace=True)


register()
