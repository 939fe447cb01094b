"""The ``trackers`` option: checked and named when wrong, out of the cache key, and a two-step
training whose logged losses read back with TensorBoard's and MLflow's own readers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from transformers import TrainerCallback

from ragfactory.flows.config import TrainConfig
from ragfactory.tasks.training.runs import plan_training, train_planned
from ragfactory.tasks.training.trackers import missing_packages, requested_trackers
from ragfactory.warehouse.store import Warehouse
from tests.training.exports import write_exports


@pytest.mark.parametrize(
    "value, names",
    [(None, []), ([], []), ("tensorboard", ["tensorboard"]), ("mlflow, tensorboard", ["mlflow", "tensorboard"])],
)
def test_trackers_are_none_by_default_and_read_as_names(value, names):
    options = {} if value is None else {"trackers": value}
    assert requested_trackers(options) == names
    assert TrainConfig(method="sft", run_id="demo-0123", options=options).options == options


@pytest.mark.parametrize("value, shown", [("neptune", "['neptune']"), (["tensorboard", "csv"], "['csv']"), (3, "[3]")])
def test_a_tracker_not_known_is_refused_naming_the_option_and_the_allowed_ones(value, shown):
    with pytest.raises(ValueError) as raised:
        TrainConfig(method="dpo", run_id="demo-0123", options={"trackers": value})
    assert (
        f"option trackers: {shown} not allowed; give any of tensorboard, mlflow, wandb "
        "(e.g. trackers=tensorboard,mlflow); none by default"
    ) in str(raised.value)


def test_every_method_takes_trackers_and_they_leave_the_model_id_alone():
    for method in ("sft", "grpo", "prm", "tree-advantage"):
        assert TrainConfig(method=method, run_id="r", options={"trackers": "mlflow"}).options
    plain = TrainConfig(method="prm", run_id="r", options={"max_length": 64})
    tracked = TrainConfig(method="prm", run_id="r", options={"max_length": 64, "trackers": ["tensorboard"]})
    assert tracked.training_fields() == plain.training_fields()
    assert tracked.training_fields()["options"] == {"max_length": 64}
    assert "options" not in TrainConfig(method="sft", run_id="r", options={"trackers": "mlflow"}).training_fields()


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_a_tracker_whose_package_is_missing_is_named_with_its_install():
    assert missing_packages(["tensorboard", "mlflow"]) is None
    assert missing_packages(["wandb"]) == "trackers: wandb needs the wandb package: pip install wandb"


class Losses(TrainerCallback):
    """The trainer's own logged losses, by global step."""

    def __init__(self):
        self.losses: dict[int, float] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if "loss" in (logs or {}):
            self.losses[state.global_step] = float(logs["loss"])


@pytest.mark.slow
def test_two_logged_steps_read_back_from_tensorboard_and_mlflow(tiny_model, tmp_path, log):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    wh = Warehouse(tmp_path / "wh")
    write_exports(wh)
    config = TrainConfig(
        method="sft",
        run_id="run-1",
        base_model=tiny_model,
        trl={"max_steps": 2, "per_device_train_batch_size": 2, "learning_rate": 1e-3, "max_length": 128},
        options={"trackers": "tensorboard,mlflow"},
    )
    plan = plan_training(wh, config)
    losses = Losses()
    metrics = train_planned(wh, config, plan, log, callbacks=[losses])

    assert sorted(losses.losses) == [1, 2] and metrics["final_loss"] == losses.losses[2]
    trackers = Path(plan.output_dir).resolve() / "trackers"
    assert metrics["tensorboard_logdir"] == str(trackers / "tensorboard")
    assert metrics["mlflow_tracking_uri"] == f"sqlite:///{trackers / 'mlflow.db'}"
    assert f"{plan.model_id}: tensorboard_logdir {trackers / 'tensorboard'}" in log.lines

    events = EventAccumulator(metrics["tensorboard_logdir"])
    events.Reload()
    scalars = events.Scalars("train/loss")  # transformers' callback prefixes train/
    assert [s.step for s in scalars] == [1, 2]
    assert [s.value for s in scalars] == pytest.approx([losses.losses[1], losses.losses[2]], rel=1e-6)  # float32

    client = MlflowClient(tracking_uri=metrics["mlflow_tracking_uri"])
    history = client.get_metric_history(metrics["mlflow_run_id"], "loss")
    assert [(m.step, m.value) for m in history] == [(1, losses.losses[1]), (2, losses.losses[2])]
    run = client.get_run(metrics["mlflow_run_id"])
    assert (run.info.run_name, run.info.status) == (plan.model_id, "FINISHED")
    assert client.get_experiment(run.info.experiment_id).name == "sft"
