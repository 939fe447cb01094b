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
    assert idle_pool(pools, "gpu") == (
        "no worker is polling work pool 'gpu'; start one with "
        "`ragfactory serve --pool gpu` or `prefect worker start --pool gpu`"
    )
    assert idle_pool(pools, "tpu").startswith("no worker is polling work pool 'tpu'")
    assert idle_pool(pools, None) is None  # a deployment without a pool is served some other way


def test_the_train_run_page_shows_the_newest_step_line_of_the_run_log():
    """The lines the trainer's callback writes (tasks/training/progress.py) are the ones it parses."""
    import logging
    from types import SimpleNamespace

    from ragfactory.dashboard.training import latest_progress
    from ragfactory.tasks.training.progress import LossLogger

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages: list[str] = []

        def emit(self, record):
            self.messages.insert(0, record.getMessage())  # newest first, as the page reads them

    logger, lines = logging.getLogger("progress-lines"), Lines()
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    callback = LossLogger(logger, prefix="dpo: ")
    callback.on_train_begin(None, SimpleNamespace(global_step=0, max_steps=3), None)
    assert latest_progress(lines.messages) is None  # no step done yet
    for step, loss in ((1, 0.6931), (2, 0.6812)):
        callback.on_log(
            None, SimpleNamespace(global_step=step, max_steps=3), None, logs={"loss": loss, "learning_rate": 2.5e-05}
        )
    assert latest_progress(lines.messages).startswith("step 2/3 (67%) loss 0.6812 lr 2.50e-05 eta ")
    assert (
        latest_progress(["training done", "dpo: step 3/3 (100%) loss 0.5 lr 0.00e+00 eta 00m00s"])
        == "step 3/3 (100%) loss 0.5 lr 0.00e+00 eta 00m00s"
    )
