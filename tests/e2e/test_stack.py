"""End to end on the real stack: Prefect server, work pools, `prefect deploy --all`, workers.

The module starts everything the way `ragfactory serve` does (``ragfactory/serve.py``), with a
temporary PREFECT_HOME (the developer's profile and database are never touched), a temporary
warehouse and a free port, then triggers deployments through ``run_deployment``: the API call
the UI's Run button makes. The nightly build runs the deployment's own parameters (the demo
build) with DecEx only: the embedded SmolLM2 generates on the cpu worker, held to the prompts'
grammars, and train-sft and train-dpo train it on that build's own SFT examples and preference
pairs, on CPU. The build expands train questions and the evaluate deployment answers test ones:
the trained model's questions and the evaluated ones do not overlap.

This machine has no GPU, yet the training deployments live on the ``gpu`` pool, whose job
variables ask for CUDA and vLLM. The test runs a worker for that pool and overrides the job
variables of its run (``RAGFACTORY_DEVICE=cpu``, ``RAGFACTORY_ENGINE=transformers``), as a
person does in the UI's "Job variables" field on a CPU-only machine.

The nightly schedule is deployed in a timezone where 02:00 is about twelve hours away, so the
scheduler really schedules the next nightly runs (checked below) but none comes due and starts
a full demo build in the middle of the test.

``RAGFACTORY_UPDATE_SCREENSHOTS=1`` (or ``make screenshots``) also copies the UI screenshot to
docs/images/ for the README.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.e2e.stack import (
    CPU_JOB,
    REPO,
    TIMEZONE,
    TRL,
    UPDATE_SCREENSHOTS,
    Chromium,
    nightly_parameters,
    run_checked,
)

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.subprocess, pytest.mark.timeout(1500)]

SCREENSHOT = REPO / "docs" / "images" / "train-dpo-custom-run.png"


def _artifacts(flow_run) -> dict[str, object]:
    """The flow run's artifacts by key."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id])))
    return {a.key: a for a in found if a.key}


def _rows(artifact) -> list[dict]:
    return json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data


def _table(artifact) -> dict[str, float]:
    """A build artifact's ``{"item", "value"}`` rows as a dict."""
    return {row["item"]: row["value"] for row in _rows(artifact)}


def test_nightly_build_is_deployed_with_its_schedule_and_concurrency(running):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("build/nightly-build")
        names = {d.name for d in client.read_deployments()}
    assert {"nightly-build", "train-sft", "train-dpo", "train-grpo", "evaluate"} <= names
    [schedule] = deployment.schedules
    assert schedule.active
    assert schedule.schedule.cron == "0 2 * * *" and schedule.schedule.timezone == TIMEZONE
    assert deployment.global_concurrency_limit is not None and deployment.global_concurrency_limit.limit == 1
    assert deployment.concurrency_options.collision_strategy.value == "CANCEL_NEW"
    assert deployment.work_pool_name == "cpu"
    assert deployment.parameters["policy_model"] == "embedded"
    assert deployment.parameters["config"]["name"] == "demo"


def test_the_scheduler_schedules_the_next_nightly_builds_at_two(running):
    from zoneinfo import ZoneInfo

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    only_nightly = DeploymentFilter(name=DeploymentFilterName(any_=["nightly-build"]))
    deadline = time.monotonic() + 120
    runs = []
    with get_client(sync_client=True) as client:
        while not runs and time.monotonic() < deadline:
            # the scheduler's runs, not those the tests start by hand
            runs = [r for r in client.read_flow_runs(deployment_filter=only_nightly) if r.auto_scheduled]
            time.sleep(0 if runs else 2)
    assert runs, f"no nightly run scheduled\n{running.stack.log('server').read_text()[-4000:]}"
    starts = [r.expected_start_time.astimezone(ZoneInfo(TIMEZONE)) for r in runs]
    assert all(s.hour == 2 and s.minute == 0 for s in starts), starts
    assert all(r.state.is_scheduled() for r in runs) and min(starts) > dt.datetime.now(dt.UTC)


def test_nightly_build_lands_rows_and_publishes_its_artifacts(running, first_build):
    flow_run, run_id = first_build
    wh = Warehouse(running.root)
    counts = query(
        wh,
        """
        select (select count(*) from nodes where run_id = $run) as nodes,
               (select count(*) from nodes where run_id = $run and format_error is not null) as format_errors,
               (select count(*) from llm_calls where run_id = $run) as llm_calls,
               (select count(distinct model_fingerprint) from llm_calls where run_id = $run) as models,
               (select count(*) from sft_examples where run_id = $run) as sft_examples,
               (select count(*) from preference_pairs where run_id = $run) as pairs""",
        {"run": run_id},
    ).to_pylist()[0]
    assert counts["nodes"] > 0 and counts["format_errors"] == 0, counts
    assert counts["llm_calls"] > 0 and counts["models"] == 1, counts
    assert counts["sft_examples"] > 0 and counts["pairs"] > 0, counts

    artifacts = _artifacts(flow_run)
    assert {"build-e2e-nightly", "build-e2e-nightly-sql"} <= artifacts.keys(), sorted(artifacts)
    table = _table(artifacts["build-e2e-nightly"])
    assert table["rows nodes"] == counts["nodes"]
    assert table["decex nodes"] == counts["nodes"] and table["decex sft rows"] == counts["sft_examples"]
    assert table["decex pairs"] == counts["pairs"]
    assert table["shards"] == 1 and table["cached shards"] == 0
    assert table["engine calls"] > 0 and "rejects" in table
    markdown = artifacts["build-e2e-nightly-sql"].data
    assert f"where run_id = '{run_id}'" in markdown


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_training_runs_on_the_build_export(running, first_build, method):
    """train-sft and train-dpo, through their deployments, on the embedded model's own data."""
    _, run_id = first_build
    flow_run = run_checked(
        running, f"train/train-{method}", {"config": {"method": method, "trl": TRL, "run_id": run_id}}, CPU_JOB
    )
    models = [
        row
        for row in Warehouse(running.root).read("models").to_pylist()
        if json.loads(row["lineage"])["run_id"] == run_id and row["method"] == method
    ]
    assert len(models) == 1, models
    assert Path(models[0]["path"]).is_dir()
    artifact = _artifacts(flow_run)[f"train-{models[0]['model_id']}"]
    metrics = {row["metric"]: row["value"] for row in _rows(artifact)}
    assert metrics["global_step"] == 1 and metrics["train_loss"] > 0, metrics


def test_evaluate_answers_test_questions_the_trained_model_never_saw(running, first_build):
    """The shipped loop is honest: the nightly build expanded train questions, train-sft trained on
    its export, and the evaluate deployment answers the test partition; the two never meet."""
    _, run_id = first_build
    wh = Warehouse(running.root)
    models = [
        row
        for row in wh.read("models").to_pylist()
        if json.loads(row["lineage"])["run_id"] == run_id and row["method"] == "sft"
    ]
    assert models, "train-sft registered no model (test_training_runs_on_the_build_export runs first)"
    model_id, trained = models[0]["model_id"], set(models[0]["question_ids"])
    config = {"model": model_id, "datasets": ["hotpotqa"], "modes": ["direct"], "max_tokens": 16, "limit": 4}
    run_checked(running, "evaluate/evaluate", {"config": config})
    evaluated = query(
        wh, "select question_id, partition, is_seen from evals where model_id = $m", {"m": model_id}
    ).to_pylist()
    assert evaluated and {(r["partition"], r["is_seen"]) for r in evaluated} == {("test", False)}, evaluated
    partitions = (
        query(
            wh,
            "select distinct partition from questions where list_contains($ids, question_id)",
            {"ids": sorted(trained)},
        )
        .column(0)
        .to_pylist()
    )
    assert trained and partitions == ["train"]
    assert trained.isdisjoint(r["question_id"] for r in evaluated)
    seen = query(wh, "select sum(n_seen) as n from eval_summary where model_id = $m", {"m": model_id})
    assert seen.to_pylist() == [{"n": 0}]


def test_second_nightly_run_is_all_cache_hits(running, first_build):
    flow_run = run_checked(running, "build/nightly-build", nightly_parameters())
    table = _table(_artifacts(flow_run)["build-e2e-nightly"])
    assert table["engine calls"] == 0, table
    assert table["cached shards"] == table["shards"] > 0, table


def test_ui_opens_the_custom_run_form_of_train_dpo(running, first_build):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    _, run_id = first_build
    with Chromium(running.tmp / "chromium-profile") as driver:
        wait = WebDriverWait(driver, 90)
        driver.get(f"{running.stack.ui_url}/deployments")
        for name in ("nightly-build", "train-sft", "train-grpo", "evaluate"):
            wait.until(ec.presence_of_element_located((By.XPATH, f"//a[normalize-space()='{name}']")))
        wait.until(ec.element_to_be_clickable((By.XPATH, "//a[normalize-space()='train-dpo']"))).click()
        wait.until(ec.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Run']"))).click()
        wait.until(ec.element_to_be_clickable((By.XPATH, "//a[.//*[normalize-space()='Custom run']]"))).click()
        wait.until(ec.url_contains("/run"))
        run_id_field = _form_field("Run Id (Optional)")
        wait.until(ec.element_to_be_clickable((By.XPATH, f"{run_id_field}//button[normalize-space()='str']"))).click()
        box = wait.until(ec.element_to_be_clickable((By.XPATH, f"{run_id_field}//textarea")))
        box.send_keys(run_id)
        method = driver.find_element(By.XPATH, f"{_form_field('Method')}//select")
        assert method.get_attribute("value") == "dpo"
        assert driver.find_element(By.XPATH, f"{run_id_field}//textarea").get_attribute("value") == run_id
        assert driver.find_element(By.XPATH, "//button[normalize-space()='Submit']").is_enabled()
        shot = running.tmp / "train-dpo-custom-run.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get(UPDATE_SCREENSHOTS):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)


def _form_field(label: str) -> str:
    """XPath of the run form's field labelled ``label`` (the UI re-renders it on every change)."""
    return (
        f"//span[normalize-space()='{label}']"
        "/ancestor::div[contains(concat(' ', @class, ' '), ' schema-form-property ')][1]"
    )


def test_a_command_line_evaluation_on_the_served_warehouse_shows_on_the_stack(running, first_build):
    """`ragfactory evaluate` on the warehouse the stack serves, with no PREFECT_API_URL of its own,
    reports its flow run to the stack's server (ragfactory/stack_marker.py), so the UI lists it."""
    import subprocess
    import sys

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    command = [
        str(Path(sys.executable).with_name("ragfactory")),
        "evaluate",
        "--model",
        "embedded",
        "--dataset",
        "hotpotqa",
        "--limit",
        "1",
        "--mode",
        "direct",
        "--max-tokens",
        "16",
        "--root",
        str(running.root),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["evaluate"])))
    assert any(
        run.state and run.state.is_completed() and run.parameters.get("config", {}).get("limit") == 1 for run in runs
    ), [(r.name, r.state_name, r.parameters) for r in runs]
