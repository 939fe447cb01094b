"""The nightly flow through the real build, train and evaluate flows, on the session's Prefect
server: two nights of a frontier DecEx build (scripted engine), SFT then DPO from a tiny random
Llama, the candidate against the incumbent on valid, the decision in ``promotions``.

The scripted engine answers the evaluation's questions by the model it serves: a trained model
(its folder under ``trained/``) answers every valid question right, the base answers "x", so
night 1's candidate wins on every question and is promoted (every delta is 1: the interval is
[1, 1]). Night 2 builds with it as the policy: a new policy has expanded nothing yet, so its
frontier starts again at the first train questions; its candidate answers as well as the
incumbent, a tie that keeps it.
"""

from __future__ import annotations

import pytest

from ragfactory.flows.config import NightlyConfig
from ragfactory.flows.nightly import nightly
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.training.registry import resolve_model_ref
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, registered_engine, scripted_llm
from tests.flows.configs import frontier_config
from tests.flows.scripted_policies import decex_policy

GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=40).questions}
pytestmark = pytest.mark.slow  # four trainings and eight evaluations: about a minute on 2 cores

TINY_TRL = {"max_steps": 1, "per_device_train_batch_size": 2}


def engine(role, cache_dir):
    """The build's DecEx policy, or an evaluation's answers: right from a trained model, 'x' else."""
    build = decex_policy(GOLD)
    trained = "trained" in role.model

    def reply(request, sample):
        text = " ".join(m.content for m in request.messages)
        if "based on your own knowledge" not in text:
            return build(request, sample)
        return next((a for q, a in GOLD.items() if q in text), "none") if trained else "x"

    return ScriptedBackend(reply, fingerprint=f"nightly-{trained}")


def nightly_config(root, base: str) -> NightlyConfig:
    return NightlyConfig.model_validate(
        {
            "build": frontier_config(root).model_dump(),
            "base_model": base,
            "trl": {"sft": TINY_TRL, "dpo": TINY_TRL},
            "window": 1,
            "mode": "direct",
            "evaluation": {"modes": ["direct"], "limit": 4, "llm": scripted_llm()},
        }
    )


@pytest.fixture(scope="module")
def nights(tmp_path_factory, tiny_model):  # noqa: F811
    root = tmp_path_factory.mktemp("nightly")
    with registered_engine(engine):
        first = nightly(nightly_config(root, tiny_model), night="n1")
        second = nightly(nightly_config(root, tiny_model), night="n2")
    return root, first, second


def test_night_one_trains_sft_then_dpo_and_promotes_a_candidate_that_wins_on_valid(nights, tiny_model):  # noqa: F811
    root, first, _ = nights
    assert [t["method"] for t in first["trained"]] == ["sft", "dpo"]
    decision = first["decision"]
    assert (decision["decision"], decision["candidate"], decision["incumbent"]) == (
        "promote",
        first["trained"][-1]["model_id"],
        tiny_model,
    )
    assert (decision["n"], decision["delta"], decision["ci_low"], decision["ci_high"]) == (4, 1.0, 1.0, 1.0)
    evaluated = (
        query(
            Warehouse(root),
            "select distinct partition from evals e join runs r using (run_id) where e.model_id = $m",
            {"m": decision["candidate"]},
        )
        .column(0)
        .to_pylist()
    )
    assert sorted(evaluated) == ["test", "valid"]  # chosen on valid, reported on test
    assert first["test"]["model_id"] == decision["candidate"]


def test_the_promoted_model_is_the_next_nights_policy_and_incumbent(nights):
    root, first, second = nights
    promoted = first["decision"]["candidate"]
    policy = (
        query(
            Warehouse(root),
            "select json_extract_string(config, '$.llm.policy.model') from runs where run_id = $r",
            {"r": second["build"]["run_id"]},
        )
        .column(0)
        .to_pylist()
    )
    assert policy == [resolve_model_ref(Warehouse(root), promoted).load]
    assert second["decision"]["incumbent"] == promoted
    assert second["earlier"] == [first["build"]["run_id"]]  # a window of one earlier night
    assert second["decision"]["decision"] == "keep" and second["decision"]["reason"].startswith("tie")
    rows = query(Warehouse(root), "select night, decision, promoted from promotions order by night").to_pylist()
    assert rows == [
        {"night": "n1", "decision": "promote", "promoted": promoted},
        {"night": "n2", "decision": "keep", "promoted": promoted},
    ]
    assert resolve_model_ref(Warehouse(root), "promoted").model_id == promoted


def test_a_night_run_again_resumes_and_decides_nothing_twice(nights, tiny_model):  # noqa: F811
    root, _, second = nights
    with registered_engine(engine):
        again = nightly(nightly_config(root, tiny_model), night="n2")
    assert [t["status"] for t in again["trained"]] == ["cached", "cached"]
    assert again["decision"]["created_at"] == second["decision"]["created_at"]


def test_a_night_that_expands_with_its_config_keeps_the_builds_policy_and_the_promoted_incumbent(nights, tiny_model):  # noqa: F811
    """``expand_with: config`` (a teacher engine writes the rows): the build runs the configured
    policy, not the promoted model, and the candidate still trains from the incumbent."""
    root, first, _ = nights
    config = nightly_config(root, tiny_model).model_copy(update={"expand_with": "config"})
    with registered_engine(engine):
        third = nightly(config, night="n3")
    sql = "select json_extract_string(config, '$.llm.policy.model') from runs where run_id = $r"
    assert query(Warehouse(root), sql, {"r": third["build"]["run_id"]}).column(0).to_pylist() == ["scripted-model"]
    assert third["decision"]["incumbent"] == first["decision"]["candidate"]
