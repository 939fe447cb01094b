"""The nightly flywheel on the real stack: two nights of the deployed `nightly` pipeline through
``run_deployment`` on the cpu worker, at tiny budgets.

The deployment's own parameters, shrunk: the build runs on the null engine (a frontier of two
train questions a night; the embedded model's tokenizer, no model), while the training (one SFT
step) and the evaluations (two valid questions, then two test ones, direct mode) use the
embedded SmolLM2. Its own warehouse root, so the package's other modules, which count the build
runs of the stack's warehouse, never see these.

Checked: night 2 is its own build run; it trains, evaluates on valid and records its decision;
its policy is the model night 1 left promoted. When night 1 kept the base (the usual outcome
of one step on null data: a tie on two questions), night 2 expands two other questions; had
it promoted the candidate, night 2's new policy would start again at the first ones.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from ragfactory.tasks.llm.embedded import EMBEDDED_DIRNAME
from ragfactory.tasks.training.registry import resolve_model_ref
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.e2e.stack import REPO, TRL, run_checked

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

STRATEGY = "r3"
R3_SIZES = {
    "n_attempts": 2,
    "max_iterations": 2,
    "min_queries": 1,
    "answer_at_limit": True,
    "max_tokens": 96,
    "top_k": 2,
    "doc_chars": 128,
}  # short prompts: an SFT row fits max_length below
SFT_TRL = TRL | {"max_length": 1024}


def flywheel_parameters(root, night: str) -> dict:
    """The deployed `nightly` parameters at tiny budgets, into warehouse ``root``."""
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    [deployment] = [d for d in spec["deployments"] if d["name"] == "nightly"]
    config = copy.deepcopy(deployment["parameters"]["config"])
    build = config["build"]
    build |= {"name": "e2e-flywheel", "warehouse": {"root": str(root)}, "datasets": [{"name": "hotpotqa", "limit": 40}]}
    build["llm"] = {"policy": {"backend": "null", "model": "embedded"}, "max_in_flight": 4}
    build["search"] = {
        "strategies": [STRATEGY],
        "select": "frontier",
        "questions_per_night": 2,
        "shard_size": 2,
        STRATEGY: R3_SIZES,
    }
    config |= {
        "name": "e2e-flywheel",
        "methods": ["sft"],
        "trl": {"sft": SFT_TRL},
        "window": 1,
        "mode": "direct",
        "evaluation": {"datasets": ["hotpotqa"], "limit": 2, "modes": ["direct"], "max_tokens": 16},
    }
    return {"config": config, "night": night}


@pytest.fixture(scope="module")
def two_nights(running, embedded_model):
    root = running.tmp / "flywheel"
    models = root / "artifacts" / "models"
    models.mkdir(parents=True)
    (models / EMBEDDED_DIRNAME).symlink_to(embedded_model)
    for night in ("n1", "n2"):
        run_checked(running, "nightly/nightly", flywheel_parameters(root, night))
    return Warehouse(root)


def _builds(wh: Warehouse) -> list[dict]:
    return query(
        wh,
        """
        select r.run_id, json_extract_string(r.config, '$.llm.policy.model') as policy,
               list(distinct n.question_id order by n.question_id) as questions
        from runs r join nodes n using (run_id) where r.flow = 'build'
        group by r.run_id, r.config, r.started_at order by r.started_at""",
    ).to_pylist()


def test_each_night_builds_trains_evaluates_on_valid_and_decides(two_nights):
    wh = two_nights
    first, second = _builds(wh)
    assert first["run_id"].endswith("-n1") and second["run_id"].endswith("-n2")
    decisions = query(
        wh, "select night, candidate, incumbent, decision, reason, promoted from promotions order by night"
    ).to_pylist()
    assert [d["night"] for d in decisions] == ["n1", "n2"]
    assert all(d["decision"] in ("promote", "keep") and d["reason"] for d in decisions)
    trained = query(
        wh,
        "select model_id, json_extract_string(lineage, '$.run_id') as run_id from models "
        "where method = 'sft' order by created_at",
    ).to_pylist()
    assert [t["run_id"] for t in trained] == [first["run_id"], second["run_id"]]
    assert [d["candidate"] for d in decisions] == [t["model_id"] for t in trained]
    valid = query(wh, "select distinct model_id from evals where partition = 'valid'").column(0).to_pylist()
    assert {decisions[1]["candidate"], decisions[1]["incumbent"]} <= set(valid)


def test_the_promoted_model_is_the_next_nights_policy_and_new_questions_follow(two_nights):
    wh = two_nights
    first, second = _builds(wh)
    [after_first] = query(wh, "select promoted, decision from promotions where night = 'n1'").to_pylist()
    assert first["policy"] == "embedded"
    assert second["policy"] == resolve_model_ref(wh, after_first["promoted"]).load
    train = (
        query(
            wh, "select question_id from questions where partition = 'train' order by sample_key, question_id limit 4"
        )
        .column(0)
        .to_pylist()
    )
    assert first["questions"] == sorted(train[:2])
    expected = train[2:4] if after_first["decision"] == "keep" else train[:2]
    assert second["questions"] == sorted(expected)


def test_the_flywheel_page_shows_both_nights_in_chromium(running, two_nights):
    """The dashboard `ragfactory serve` starts, pointed at the flywheel's warehouse."""
    import time

    import httpx
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from ragfactory.process_groups import stop
    from ragfactory.serve import free_port, start_dashboard
    from tests.e2e.stack import Chromium

    port = free_port()
    env = {**running.stack.env, "RAGFACTORY_HOME": str(two_nights.root)}
    process = start_dashboard(port, env, running.tmp / "logs" / "flywheel-dashboard.log")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/flywheel", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        with Chromium(running.tmp / "flywheel-profile") as browser:
            browser.get(f"http://127.0.0.1:{port}/flywheel")
            rows = WebDriverWait(browser, 60).until(
                lambda d: d.find_elements(By.CSS_SELECTOR, "#nights tbody tr") or None
            )
            assert [row.get_attribute("id").rsplit("-", 1)[-1] for row in rows] in (["n1", "n2"], ["n2", "n1"])
            lines = WebDriverWait(browser, 60).until(  # the promoted model's valid and test scores by night
                lambda d: d.find_elements(By.CSS_SELECTOR, "#plot-flywheel .scatterlayer .trace") or None
            )
            assert len(lines) == 2
    finally:
        stop(process)
