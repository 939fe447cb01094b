"""prefect.yaml: its deployments point at real flows with parameters their models accept.

`prefect deploy` only checks that an entrypoint loads; a default parameter that the flow's
pydantic model refuses would surface at 02:00 as a failed run. These checks catch that (and a
demo config that drifted from configs/demo.yaml) without a server; tests/e2e deploys for real.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from ragfactory.flows.config import BuildConfig, EvalConfig, NightlyConfig, TrainConfig, load_build_config

REPO = Path(__file__).resolve().parents[1]
SPEC = yaml.safe_load((REPO / "prefect.yaml").read_text())
DEPLOYMENTS = {d["name"]: d for d in SPEC["deployments"]}


@pytest.fixture(autouse=True)
def no_engine_env(monkeypatch):
    monkeypatch.delenv("RAGFACTORY_ENGINE", raising=False)


def test_the_deployments_and_their_pools():
    pools = {name: d["work_pool"]["name"] for name, d in DEPLOYMENTS.items()}
    assert pools == {
        "nightly-build": "cpu",
        "nightly": "cpu",
        "train-sft": "gpu",
        "train-dpo": "gpu",
        "train-grpo": "gpu",
        "train-grpo-agentic": "gpu",
        "train-tree-advantage": "gpu",
        "train-prm": "gpu",
        "evaluate": "cpu",
    }
    envs = {d["work_pool"]["name"]: d["work_pool"]["job_variables"]["env"] for d in DEPLOYMENTS.values()}
    assert envs == {
        "cpu": {"RAGFACTORY_DEVICE": "cpu", "RAGFACTORY_ENGINE": "transformers"},
        "gpu": {"RAGFACTORY_DEVICE": "cuda", "RAGFACTORY_ENGINE": "vllm"},
    }


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_entrypoint_names_a_flow_function(name):
    path, function = DEPLOYMENTS[name]["entrypoint"].split(":")
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    flows = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function]
    assert flows, f"{path} has no function {function}"
    decorators = [ast.unparse(d) for d in flows[0].decorator_list]
    assert any(d.startswith("flow(") for d in decorators), decorators


def test_flow_runs_start_in_the_checkout_they_were_deployed_from():
    [step] = SPEC["pull"]
    assert step == {"prefect.deployments.steps.set_working_directory": {"directory": "{{ $PWD }}"}}


def test_nightly_build_defaults_to_the_demo_build():
    parameters = DEPLOYMENTS["nightly-build"]["parameters"]
    assert parameters["policy_model"] == "embedded"
    assert BuildConfig.model_validate(parameters["config"]) == load_build_config(REPO / "configs" / "demo.yaml")


def test_the_pool_picks_the_nightly_engine(monkeypatch):
    monkeypatch.setenv("RAGFACTORY_ENGINE", "vllm")
    config = BuildConfig.model_validate(DEPLOYMENTS["nightly-build"]["parameters"]["config"])
    assert config.llm.policy.backend == "vllm"


def test_nightly_schedule_and_concurrency():
    nightly = DEPLOYMENTS["nightly-build"]
    [schedule] = nightly["schedules"]
    assert schedule["cron"] == "0 2 * * *" and schedule["active"] is True
    assert schedule["timezone"] == "{{ prefect.variables.ragfactory_timezone }}"
    assert nightly["concurrency_limit"] == {"limit": 1, "collision_strategy": "CANCEL_NEW"}
    assert all("schedules" not in d for n, d in DEPLOYMENTS.items() if n not in ("nightly-build", "nightly"))


@pytest.mark.parametrize(
    "method, table, extra",
    [
        ("sft", "sft_examples", {}),
        ("dpo", "preference_pairs", {}),
        ("grpo", "grpo_prompts", {}),
        ("grpo-agentic", "grpo_prompts", {"options": {"max_turns": 3, "top_k": 3}}),
        ("tree-advantage", "trajectories", {"trl": {"epsilon": 0.2, "beta": 0.001}}),
        ("prm", "step_labels", {"options": {"heldout_fraction": 0.1}}),
    ],
)
def test_training_deployments_take_a_build_run_id(method, table, extra):
    parameters = DEPLOYMENTS[f"train-{method}"]["parameters"]["config"]
    assert parameters == {"method": method, "run_id": None, **extra}
    with pytest.raises(ValueError, match="exactly one of run_id"):
        TrainConfig.model_validate(parameters)  # the UI's form asks for it
    assert TrainConfig.model_validate({**parameters, "run_id": "demo-0123"}).export_table == table


def test_evaluate_defaults_validate():
    config = EvalConfig.model_validate(DEPLOYMENTS["evaluate"]["parameters"]["config"])
    assert (config.model, config.datasets, config.limit) == ("embedded", ["hotpotqa"], 20)


def test_the_nightly_build_expands_train_and_the_evaluation_answers_test():
    build = BuildConfig.model_validate(DEPLOYMENTS["nightly-build"]["parameters"]["config"])
    assert build.search.partition == "train" and build.export.decontamination.mode == "drop"
    assert build.export.decontamination.against == ["valid", "test"]
    assert build.partitions.rule_for(build.datasets[3]).fixed == "test"  # bamboogle: evaluation only
    evaluation = EvalConfig.model_validate(DEPLOYMENTS["evaluate"]["parameters"]["config"])
    assert evaluation.partition == "test"


def test_the_flywheel_builds_the_frontier_and_decides_on_valid():
    deployment = DEPLOYMENTS["nightly"]
    config = NightlyConfig.model_validate(deployment["parameters"]["config"])
    assert (config.build.search.select, config.build.search.questions_per_night) == ("frontier", 32)
    assert config.build.datasets == load_build_config(REPO / "configs" / "demo.yaml").datasets
    assert (config.methods, config.metric, config.mode, config.window) == (["sft", "dpo"], "f1", "agentic", 2)
    [schedule] = deployment["schedules"]
    assert schedule["cron"] == "0 3 * * *" and deployment["concurrency_limit"]["limit"] == 1
