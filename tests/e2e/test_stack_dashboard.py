"""The dashboard in Debian's headless Chromium, over the real stack's nightly build (after
test_stack.py, whose trainings and evaluation the Models page then shows).

``ragfactory serve`` starts the dashboard beside the Prefect UI; here the stack of conftest.py
gets one the same way (``Stack.add_dashboard``: ``ragfactory dashboard`` in its own process,
reading the stack's warehouse and submitting to its server). A person's steps: open a pruned
node of a DecEx tree and read its value; see the reward plots; start a DPO training from the
Train page and watch it reach Completed; fill the form the page draws from SFT's and DPO's
declared options, train two steps each, and find a loss curve point per logged step on the run
page, linked from the Models page; be told why a build without pairs cannot train DPO.

``RAGFACTORY_UPDATE_SCREENSHOTS=1`` (or ``make screenshots``) copies the Models and Train pages'
screenshots to docs/images/ for the README (the runs, tree, rewards and SQL pages' come from the
five-strategy build of tests/dashboard/test_browser.py).
"""

from __future__ import annotations

import json
import os
import shutil
import time

import httpx
import pytest

from ragfactory.serve import free_port
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.runs import now, record_run
from ragfactory.warehouse.store import Warehouse
from tests.e2e.stack import CPU_JOB, REPO, RUN_TIMEOUT_S, UPDATE_SCREENSHOTS, Chromium, run_checked

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.subprocess, pytest.mark.timeout(1500)]

IMAGES = REPO / "docs" / "images"
# a DPO training other than test_stack's (another learning rate), so it trains rather than
# finding that model already registered
DASHBOARD_TRL = {"max_steps": 1, "per_device_train_batch_size": 1, "max_length": 512, "learning_rate": 2e-6}


@pytest.fixture(scope="module")
def dashboard(running):
    process = running.stack.add_dashboard(free_port())
    url = running.stack.dashboard_url
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, running.stack.log("dashboard").read_text()[-4000:]
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"dashboard at {url} did not answer in 120 s")


@pytest.fixture(scope="module")
def browser(running):
    with Chromium(running.tmp / "dashboard-profile") as driver:
        yield driver


def _shoot(driver, running, name: str) -> None:
    shot = running.tmp / f"dashboard-{name}.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get(UPDATE_SCREENSHOTS):
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, IMAGES / shot.name)


def _wait(driver, seconds: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds)


def test_runs_page_lists_the_nightly_build(running, first_build, dashboard, browser):
    from selenium.webdriver.common.by import By

    _, run_id = first_build
    browser.get(dashboard)
    section = _wait(browser).until(lambda d: d.find_element(By.ID, f"run-{run_id}"))
    assert "completed" in section.text and "decex" in section.text


def test_tree_viewer_shows_a_pruned_nodes_value(running, first_build, dashboard, browser):
    from selenium.webdriver.common.by import By

    _, run_id = first_build
    [pruned] = query(
        Warehouse(running.root),
        """
        select node_id, question_id, value from nodes
        where run_id = $run and strategy = 'decex' and not is_selected and value is not null
        order by depth, node_id limit 1""",
        {"run": run_id},
    ).to_pylist()
    browser.get(f"{dashboard}/tree?run={run_id}&strategy=decex&question={pruned['question_id']}")
    _wait(browser).until(lambda d: d.execute_script("return document.body.dataset.treeReadyMs"))
    node = browser.find_element(By.CSS_SELECTOR, f"#tree g.node[data-node-id='{pruned['node_id']}']")
    assert "pruned" in node.get_attribute("class").split()
    node.find_element(By.TAG_NAME, "text").click()
    _wait(browser).until(lambda d: d.find_element(By.ID, "details").get_attribute("data-node-id") == pruned["node_id"])
    assert float(browser.find_element(By.ID, "detail-value").text) == round(pruned["value"], 4)
    assert browser.find_element(By.ID, "detail-status").text == "pruned"


def test_rewards_page_draws_the_value_distribution_with_its_sql(running, first_build, dashboard, browser):
    from selenium.webdriver.common.by import By

    _, run_id = first_build
    browser.get(f"{dashboard}/rewards?run={run_id}")
    _wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#plot-node_values .main-svg"))
    bars = browser.find_elements(By.CSS_SELECTOR, "#plot-node_values g.trace.bars")
    assert bars, "the node value histogram has no trace"
    sql = browser.find_element(By.ID, "sql-node_values").get_attribute("textContent")
    params = browser.find_element(By.ID, "params-node_values").get_attribute("textContent")
    assert "n.run_id = $run" in sql and f'$run = "{run_id}"' in params  # the SQL as it ran, and its parameter


def test_train_page_starts_dpo_and_follows_it_to_completed(running, first_build, dashboard, browser):
    from selenium.webdriver.common.by import By

    _, run_id = first_build
    browser.get(f"{dashboard}/train?run={run_id}&method=dpo")
    for field, value in (("config", {"trl": DASHBOARD_TRL}), ("job-variables", CPU_JOB)):
        box = _wait(browser).until(lambda d, field=field: d.find_element(By.ID, field))
        box.clear()
        box.send_keys(json.dumps(value))
    browser.find_element(By.ID, "submit").click()
    _wait(browser).until(lambda d: "/train/runs/" in d.current_url)
    _wait(browser, RUN_TIMEOUT_S).until(
        lambda d: d.find_element(By.ID, "state").text in ("Completed", "Failed", "Crashed", "Cancelled")
    )
    state = browser.find_element(By.ID, "state").text
    assert state == "Completed", f"{state}: {browser.find_element(By.ID, 'state-message').text}\n{running.logs()}"
    flow_run_id = browser.find_element(By.ID, "state").get_attribute("data-flow-run")
    # the trainer's step line, read from the run's logs: one step of one (logging_steps 1)
    _wait(browser).until(lambda d: d.find_element(By.ID, "progress").text.startswith("step 1/1 (100%) loss "))
    link = browser.find_element(By.ID, "flow-run-link").get_attribute("href")
    assert link == f"{running.stack.ui_url}/runs/flow-run/{flow_run_id}"
    _shoot(browser, running, "train-run")
    trained = [
        row
        for row in Warehouse(running.root).read("models").to_pylist()
        if row["method"] == "dpo" and json.loads(row["config"])["trl"] == DASHBOARD_TRL
    ]
    assert len(trained) == 1 and json.loads(trained[0]["lineage"])["run_id"] == run_id
    browser.get(f"{dashboard}/models")  # the model the page trained is on the Models page
    row = _wait(browser).until(lambda d: d.find_element(By.ID, f"model-{trained[0]['model_id']}"))
    assert "dpo" in row.text and run_id in row.text


def test_models_page_plots_the_base_beside_the_trained_model(running, first_build, dashboard, browser):
    """test_stack.py evaluated its SFT model; the base answers the same test questions here."""
    from selenium.webdriver.common.by import By

    config = {"datasets": ["hotpotqa"], "modes": ["direct"], "max_tokens": 16, "limit": 4}
    run_checked(running, "evaluate/evaluate", {"config": {"model": "embedded", **config}})
    trained = query(Warehouse(running.root), "select distinct model_id from evals where model_id like 'sft-%'")
    [sft] = trained.column("model_id").to_pylist()
    browser.get(f"{dashboard}/models")
    assert _wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#lineage tbody tr"))
    _wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#plot-evals g.trace.bars"))
    names = browser.execute_script("return document.getElementById('plot-evals').data.map(t => t.name)")
    assert sorted(names) == sorted(["embedded (base)", sft]), names
    _shoot(browser, running, "models")


def test_sql_page_shows_a_result_table(running, first_build, dashboard, browser):
    from selenium.webdriver.common.by import By

    browser.get(f"{dashboard}/sql?q=select+strategy,+kind,+count(*)+as+n+from+nodes+group+by+all+order+by+all")
    assert _wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#result tbody tr"))


# the fields a person fills in the generated Train form: two steps of one row or pair, 512
# tokens, a learning rate no other test trains with (so each trains rather than finding its model
# registered); then the trl the flow is sent: only the fields off the method's defaults (DPO's
# batch is 1 already, SFT's accumulation is dropped once a batch is asked for)
FORM_FIELDS = {
    "sft": {"max_steps": "2", "per_device_train_batch_size": "1", "learning_rate": "3e-05", "max_length": "512"},
    "dpo": {"max_steps": "2", "per_device_train_batch_size": "1", "gradient_accumulation_steps": "1"}
    | {"learning_rate": "3e-06", "max_length": "512"},
}
SENT_TRL = {
    "sft": {"max_steps": 2, "per_device_train_batch_size": 1, "learning_rate": 3e-05, "max_length": 512},
    "dpo": {"max_steps": 2, "gradient_accumulation_steps": 1, "learning_rate": 3e-06, "max_length": 512},
}


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_the_generated_form_trains_and_the_run_page_draws_a_point_per_logged_step(running, dashboard, browser, method):
    """On a build of two hand-written SFT conversations and two pairs (tests/training/exports.py),
    so that it needs no nightly build; it adds a build row to the shared warehouse, as the last
    test of the package does."""
    from selenium.webdriver.common.by import By

    from ragfactory.dashboard.curves import logged_steps
    from ragfactory.dashboard.training import Prefect
    from tests.training.exports import write_exports

    run_id = "e2e-form"
    wh = Warehouse(running.root)
    if not wh.read("runs", run_id=run_id).num_rows:
        record_run(wh, run_id, "build", "completed", {}, "form", now())
        write_exports(wh, run_id, n=2)
    browser.get(f"{dashboard}/train?run={run_id}&method={method}")
    for key, value in FORM_FIELDS[method].items():
        box = _wait(browser).until(lambda d, key=key: d.find_element(By.ID, f"opt-trl-{key}"))
        box.clear()
        box.send_keys(value)
    jobs = browser.find_element(By.ID, "job-variables")
    jobs.clear()
    jobs.send_keys(json.dumps(CPU_JOB))
    browser.find_element(By.ID, "submit").click()
    _wait(browser).until(lambda d: "/train/runs/" in d.current_url)
    _wait(browser, RUN_TIMEOUT_S).until(lambda d: d.find_element(By.ID, "curves").get_attribute("data-done"))
    state = browser.find_element(By.ID, "state").text
    assert state == "Completed", f"{state}: {browser.find_element(By.ID, 'state-message').text}\n{running.logs()}"
    models = Warehouse(running.root).read("models").to_pylist()
    [model] = [
        row for row in models if row["method"] == method and json.loads(row["config"])["trl"] == SENT_TRL[method]
    ]
    flow_run_id = browser.find_element(By.ID, "state").get_attribute("data-flow-run")
    # the trainer logs every step (logging_steps 1): a line each in the flow run's log
    logged = logged_steps(Prefect(running.stack.api_url).log_messages(flow_run_id))
    points = browser.find_elements(By.CSS_SELECTOR, "#curve-loss circle.point")
    assert len(points) == len(logged) == json.loads(model["metrics"])["global_step"] == 2
    assert [p.get_attribute("textContent").split(":")[0] for p in points] == ["step 1", "step 2"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#curve-learning-rate circle.point")) == 2
    browser.get(f"{dashboard}/models")  # the model links back to these curves
    row = _wait(browser).until(lambda d: d.find_element(By.ID, f"model-{model['model_id']}"))
    assert (
        row.find_element(By.CSS_SELECTOR, "a.curves-link").get_attribute("href").endswith(f"/train/runs/{flow_run_id}")
    )
    if method == "dpo":
        browser.get(f"{dashboard}/train/runs/{flow_run_id}")
        _wait(browser).until(lambda d: d.find_element(By.ID, "curves").get_attribute("data-done"))
        _shoot(browser, running, "train-curves")


def test_train_page_refuses_a_build_without_pairs(running, first_build, dashboard, browser):
    """Last in the package: it adds a build row (no rows of any export) to the shared warehouse."""
    from selenium.webdriver.common.by import By

    record_run(Warehouse(running.root), "e2e-no-pairs", "build", "completed", {}, "none", now())
    browser.get(f"{dashboard}/train?run=e2e-no-pairs&method=dpo")
    _wait(browser).until(lambda d: d.find_element(By.ID, "submit")).click()
    message = _wait(browser).until(lambda d: d.find_element(By.ID, "train-message")).text
    assert message == (
        "refused: build e2e-no-pairs has no preference_pairs rows, which dpo trains on "
        "(its strategies exported none); pick another build or method"
    )
    assert "/train/runs/" not in browser.current_url
    _shoot(browser, running, "train-refused")
