"""Frontier selection: each night's build expands the next questions in sample-key order that no
earlier run of the strategy with the same policy expanded, as its own run.

Two nights of a DecEx build (scripted engine) over 40 bundled HotpotQA questions, two new
questions a night: night 2 expands the third and fourth train questions, night 1's run row is
kept, a rerun of a night plans the questions it planned before, and a new policy starts again
from the first questions. A dry run on the null engine (docs/null_engine.md), whose model field
names only its tokenizer, spends no real engine's questions.
"""

from __future__ import annotations

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, registered_engine
from tests.flows.configs import frontier_config
from tests.flows.scripted_policies import decex_policy

GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=40).questions}


def _expanded(root, run_id: str) -> list[str]:
    return (
        query(Warehouse(root), "select distinct question_id from nodes where run_id = $r order by 1", {"r": run_id})
        .column(0)
        .to_pylist()
    )


def _train_ids(root) -> list[str]:
    return (
        query(
            Warehouse(root),
            "select question_id from questions where partition = 'train' order by sample_key, question_id",
        )
        .column(0)
        .to_pylist()
    )


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    root = tmp_path_factory.mktemp("frontier")
    with registered_engine(ScriptedBackend(decex_policy(GOLD))):
        first = build(frontier_config(root), night="n1")
        second = build(frontier_config(root), night="n2")
    return root, first, second


def test_each_night_expands_the_next_questions_as_its_own_run(nights):
    root, first, second = nights
    train = _train_ids(root)
    assert first["status"] == second["status"] == "completed"
    assert first["run_id"].endswith("-n1") and second["run_id"].endswith("-n2")
    assert _expanded(root, first["run_id"]) == sorted(train[:2])
    assert _expanded(root, second["run_id"]) == sorted(train[2:4])
    runs = query(Warehouse(root), "select run_id from runs where flow = 'build' order by run_id").column(0).to_pylist()
    assert runs == [first["run_id"], second["run_id"]]


def test_a_rerun_night_plans_the_same_questions_and_a_new_policy_starts_over(nights):
    root, first, _ = nights
    train = _train_ids(root)
    with registered_engine(ScriptedBackend(decex_policy(GOLD))):
        again = build(frontier_config(root), night="n1")
        other = build(frontier_config(root, model="another-policy"), night="n3")
    assert again["run_id"] == first["run_id"] and _expanded(root, again["run_id"]) == sorted(train[:2])
    assert _expanded(root, other["run_id"]) == sorted(train[:2])


def test_dry_runs_on_the_null_engine_leave_a_real_engine_night_its_questions(tmp_path):
    root = tmp_path / "wh"
    dry = [build(frontier_config(root, model="embedded", backend="null"), night=f"dry{i}") for i in (1, 2, 3)]
    with registered_engine(ScriptedBackend(decex_policy(GOLD))):
        real = build(frontier_config(root, model="embedded"), night="real")
    train = _train_ids(root)
    assert [night["status"] for night in dry] == ["completed"] * 3 and real["status"] == "completed"
    assert [_expanded(root, night["run_id"]) for night in dry] == [sorted(train[i : i + 2]) for i in (0, 2, 4)]
    assert _expanded(root, real["run_id"]) == sorted(train[:2])


def test_frontier_keys_are_checked_and_leave_other_hashes_alone():
    base = BuildConfig(search={"strategies": ["decex"]})
    assert BuildConfig(search={"strategies": ["decex"], "select": "sample"}).config_hash() == base.config_hash()
    frontier = BuildConfig(search={"strategies": ["decex"], "select": "frontier", "questions_per_night": 4})
    assert frontier.config_hash() != base.config_hash()
    with pytest.raises(ValueError, match="questions_per_night is not set"):
        BuildConfig(search={"select": "frontier"})
    with pytest.raises(ValueError, match="select is not 'frontier'"):
        BuildConfig(search={"questions_per_night": 3})
