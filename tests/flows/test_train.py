"""The `train` flow on a real DecEx export from a scripted build, under the Prefect harness.

The first call trains a tiny random Llama and registers it; an identical second call is a cache
hit that trains nothing. A retried train task resumes from the checkpoint its failed attempt left.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import TrainConfig
from ragfactory.flows.train import train
from ragfactory.tasks import train as train_tasks
from ragfactory.tasks.training import runs
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.flows.scripted_policies import decex_config
from tests.training.failing import FailOnce


@pytest.fixture
def built(tmp_path, scripted):
    root = tmp_path / "wh"
    summary = build(decex_config(root))
    assert summary["status"] == "completed" and summary["exports"][0]["sft_examples"] > 0
    return root, summary["run_id"]


def bytecode_lines(flow_run_id) -> list[str]:
    """The lines of a flow run's log that are disassembled Python. datasets fingerprints the
    trainer's map functions with dill, which disassembles each into a captured stdout to read its
    globals; under a flow's ``log_prints`` those prints went to the run's log (hundreds of lines)."""
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=30)
    logs = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
    with get_client(sync_client=True) as client:
        messages = [log.message for log in client.read_logs(log_filter=logs, limit=200)]
    assert any("Finished" in m for m in messages), messages  # the run's log was read
    return [m for m in messages if re.search(r"\b(RESUME|LOAD_FAST|LOAD_GLOBAL|RETURN_VALUE)\b", m)]


def _train_config(root, run_id, model, method="sft") -> TrainConfig:
    return TrainConfig(
        method=method,
        run_id=run_id,
        base_model=model,
        warehouse={"root": str(root)},
        trl={"max_steps": 1, "per_device_train_batch_size": 2},
    )


def test_train_registers_a_model_and_an_identical_request_is_a_cache_hit(built, tiny_model, monkeypatch):  # noqa: F811
    root, run_id = built
    state = train(_train_config(root, run_id, tiny_model), return_state=True)
    first = state.result()
    assert first["status"] == "trained"
    assert bytecode_lines(state.state_details.flow_run_id) == []
    assert (Path(first["path"]) / "model.safetensors").is_file()
    assert Path(first["path"]).is_relative_to(Path(root).resolve() / "artifacts" / "models" / "trained")
    rows = query(Warehouse(root), "select * from models").to_pylist()
    assert [r["model_id"] for r in rows] == [first["model_id"]]
    assert rows[0]["method"] == "sft" and rows[0]["export_snapshot"]
    assert json.loads(rows[0]["lineage"])["run_id"] == run_id
    assert json.loads(rows[0]["metrics"])["global_step"] == 1

    def no_training(*args, **kwargs):
        raise AssertionError("a cache hit trained")

    monkeypatch.setattr(train_tasks, "train_planned", no_training)
    again = train(_train_config(root, run_id, tiny_model))
    assert again["status"] == "cached" and again["model_id"] == first["model_id"]
    other = train_tasks.plan_model.fn(str(root), _train_config(root, run_id, tiny_model, "dpo"))
    assert other["cached"] is None and other["plan"]["model_id"] != first["model_id"]


def test_a_retried_train_task_resumes_from_its_checkpoint(tmp_path, tiny_model, monkeypatch):  # noqa: F811
    from tests.training.exports import write_exports

    wh = Warehouse(tmp_path / "wh")
    write_exports(wh)
    config = _train_config(wh.root, "run-1", tiny_model).model_copy(update={"save_steps": 1})
    config = TrainConfig.model_validate(config.model_dump() | {"trl": {**config.trl, "max_steps": 3}})
    plan = train_tasks.plan_model(str(wh.root), config)["plan"]
    monkeypatch.setattr(train_tasks.train_model, "retry_delay_seconds", [0, 0])
    metrics = train_tasks.train_model(str(wh.root), config, plan, callbacks=[FailOnce()])
    assert metrics["resumed_from"].endswith("checkpoint-1") and metrics["global_step"] == 3
    assert runs.TrainingPlan(**plan).output_dir == plan["output_dir"]


def test_a_bad_request_fails_at_once_without_retries(tmp_path, tiny_model, monkeypatch):  # noqa: F811
    from tests.training.exports import write_exports

    wh = Warehouse(tmp_path / "wh")
    write_exports(wh)
    config = _train_config(wh.root, "run-1", tiny_model)
    config = TrainConfig.model_validate(config.model_dump() | {"trl": {"no_such_option": 1}})
    plan = train_tasks.plan_model(str(wh.root), config)["plan"]
    attempts = []
    original = runs.train_planned

    def counting(*args, **kwargs):
        attempts.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(train_tasks, "train_planned", counting)
    monkeypatch.setattr(train_tasks.train_model, "retry_delay_seconds", [0, 0])
    with pytest.raises(ValueError, match="no_such_option"):
        train_tasks.train_model(str(wh.root), config, plan)
    assert len(attempts) == 1


def test_train_command_trains_then_hits_the_cache(built, tiny_model):  # noqa: F811
    from typer.testing import CliRunner

    from ragfactory.cli import app

    root, run_id = built
    args = [
        "train",
        "--method",
        "sft",
        "--run-id",
        run_id,
        "--base-model",
        str(tiny_model),
        "--trl",
        "max_steps=1",
        "--trl",
        "per_device_train_batch_size=2",
        "--name",
        "nightly-sft",
        "--root",
        str(root),
    ]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "(trained)" in first.output and "train_loss" in first.output
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0 and "(cached)" in second.output, second.output
    row = Warehouse(root).read("models").to_pylist()[0]
    assert json.loads(row["lineage"])["name"] == "nightly-sft"
    bad = CliRunner().invoke(app, [*args[:-2], "--trl", "max_steps", "--root", str(root)])
    assert bad.exit_code == 1 and "expected key=value" in bad.output
