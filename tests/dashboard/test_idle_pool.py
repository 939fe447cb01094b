"""The Train page refuses a submission no worker would pick up: the deployment's pool has no
online worker (the stack's `gpu` pool on a machine that started only a `cpu` worker)."""

from __future__ import annotations

from dataclasses import dataclass

from prefect.client.schemas.objects import WorkerStatus

from ragfactory.dashboard.training import idle_pool


@dataclass
class Worker:
    status: WorkerStatus


class Pools:
    """What the dashboard asks a Prefect client about a pool's workers, answered from a table."""

    def __init__(self, workers: dict[str, list[Worker]]):
        self.workers = workers

    def read_workers_for_work_pool(self, pool: str) -> list[Worker]:
        return self.workers.get(pool, [])


def test_a_pool_without_an_online_worker_is_named_with_the_command_that_fixes_it():
    pools = Pools({"cpu": [Worker(WorkerStatus.ONLINE)], "gpu": [Worker(WorkerStatus.OFFLINE)]})
    assert idle_pool(pools, "cpu") is None
    assert idle_pool(pools, "gpu") == ("no worker is polling work pool 'gpu'; start one with "
                                       "`ragfactory serve --pool gpu` or `prefect worker start --pool gpu`")
    assert idle_pool(pools, "tpu").startswith("no worker is polling work pool 'tpu'")
    assert idle_pool(pools, None) is None  # a deployment without a pool is served some other way
