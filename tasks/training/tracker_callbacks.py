"""The callbacks of the trackers a training reports to (``trackers.py``: the option and places).

TensorBoard is transformers' own ``TensorBoardCallback`` pointed at the model's folder. MLflow is a
callback of its own: transformers' ``MLflowCallback`` takes its store from process-wide state (the
``mlflow`` module's tracking URI, set once), so a second training in the same process would log
into the first one's store; this one holds an ``MlflowClient`` of its run's store. W&B is
transformers' ``WandbCallback`` with a run it starts offline, its files in the model's folder.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from transformers import TrainerCallback

from ragfactory.tasks.training.trackers import missing_packages, tracker_places, trackers_folder


class MLflowTracker(TrainerCallback):
    """Every number a trainer logs, as a metric at its global step of one MLflow run."""

    def __init__(self, tracking_uri: str, artifacts: Path, experiment: str, run_name: str):
        from mlflow.tracking import MlflowClient

        for name in ("mlflow.store.db.utils", "alembic"):  # the store's table creation, line by line
            logging.getLogger(name).setLevel(logging.WARNING)
        self.client = MlflowClient(tracking_uri=tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment, artifacts.as_uri())
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id

    def on_log(self, args, state, control, logs=None, **kwargs):
        from mlflow.entities import Metric

        if not state.is_world_process_zero:
            return
        now = int(time.time() * 1000)
        numbers = {k: v for k, v in (logs or {}).items() if isinstance(v, int | float) and not isinstance(v, bool)}
        metrics = [Metric(k, float(v), now, state.global_step) for k, v in numbers.items()]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.client.set_terminated(self.run_id)


def tensorboard_callback(logdir: str):
    from transformers.integrations import TensorBoardCallback

    callback = TensorBoardCallback()
    callback.logging_dir = logdir  # its writer opens there when training begins
    return callback


def wandb_callback(folder: Path, project: str, run_name: str):
    """transformers' W&B callback on an offline run whose files land in ``folder/wandb``."""
    from transformers.integrations import WandbCallback

    class OfflineWandb(WandbCallback):
        def setup(self, args, state, model, **kwargs):
            if state.is_world_process_zero and self._wandb.run is None:
                folder.mkdir(parents=True, exist_ok=True)
                self._wandb.init(mode="offline", dir=str(folder), project=project, name=run_name)
            super().setup(args, state, model, **kwargs)

        def on_train_end(self, args, state, control, **kwargs):
            super().on_train_end(args, state, control, **kwargs)
            if self._wandb.run is not None:
                self._wandb.finish()

    return OfflineWandb()


def tracker_callbacks(names: list[str], output_dir: str, experiment: str, run_name: str) -> tuple[list, dict]:
    """The callbacks of the trackers ``names`` and where their files go (``tracker_places``, with
    the MLflow run's id); a tracker whose package is missing is an error naming the package."""
    if problem := missing_packages(names):
        raise ValueError(problem)
    places = tracker_places(names, output_dir)
    callbacks = []
    if "tensorboard" in names:
        callbacks.append(tensorboard_callback(places["tensorboard_logdir"]))
    if "mlflow" in names:
        folder = trackers_folder(output_dir).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        tracker = MLflowTracker(places["mlflow_tracking_uri"], folder / "mlflow-artifacts", experiment, run_name)
        places["mlflow_run_id"] = tracker.run_id
        callbacks.append(tracker)
    if "wandb" in names:
        callbacks.append(wandb_callback(trackers_folder(output_dir).resolve(), experiment, run_name))
    return callbacks, places
