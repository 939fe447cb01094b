"""Process-reward training through the `train` flow on a scripted TreePS build, then evaluated
against its base: the trained model's `models` row names its method and export, and
`eval_summary` holds the base and the trained model on the same questions.

The engines are the only doubles (scripted policies, one per model for the evaluation); the
build, the tree-advantage training of a tiny random Llama, the registry and the evaluation are real.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig, EvalConfig, TrainConfig
from ragfactory.flows.evaluate import evaluate
from ragfactory.flows.train import train
from ragfactory.tasks.training.prm.heldout import heldout_ids
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import base_policy, hotpotqa_gold, trained_policy
from tests.search.treeps.treeps_scenario import path_of


def right_wrong_search(request, sample: int) -> str:
    """By sample index: the gold answer, a wrong one, a search; so leaves differ and A(n) != 0."""
    return [
        f"<reason>Known.</reason> <answer> {hotpotqa_gold(request.messages[0].content)} </answer>",
        "<reason>Guess.</reason> <answer> Lyon </answer>",
        f"<reason>Look it up.</reason> <search> {path_of(request)}|{sample} </search>",
    ][sample % 3]


@pytest.fixture
def treeps_build(tmp_path, engines):
    engines(ScriptedBackend(right_wrong_search))
    root = tmp_path / "wh"
    summary = build(
        BuildConfig.model_validate(
            {
                "name": "tree-advantage-test",
                "warehouse": {"root": str(root)},
                "datasets": [{"name": "hotpotqa"}],
                "retrieval": {"dense": {"enabled": False}},
                "llm": scripted_llm(),
                "search": {"strategies": ["treeps"], "questions_per_dataset": 2, "treeps": {"n": 3, "depth": 2}},
                "export": {"trajectories": {"n_samples": 2}},
            }
        )
    )
    assert summary["status"] == "completed", summary
    return root, summary["run_id"]


def test_tree_advantage_trains_registers_and_is_compared_with_its_base(treeps_build, tiny_model, engines):  # noqa: F811
    """The scripted trees: each question's root has a right answer (A > 0), a wrong one (A < 0) and
    a search whose children answer right and wrong; two trajectories of each are sampled."""
    root, run_id = treeps_build
    wh = Warehouse(root)
    sampled = query(wh, "select count(*) as n from trajectories where is_sampled").to_pylist()[0]["n"]
    assert sampled == 4  # two questions, two sampled trajectories each
    trained = train(
        TrainConfig(
            method="tree-advantage",
            run_id=run_id,
            base_model=tiny_model,
            warehouse={"root": str(root)},
            trl={"max_steps": 1, "per_device_train_batch_size": 2},
        )
    )
    assert trained["status"] == "trained" and trained["model_id"].startswith("tree-advantage-")
    assert trained["metrics"]["n_rows"] == sampled and trained["metrics"]["global_step"] == 1
    assert trained["metrics"]["final_loss"] != 0.0
    [row] = query(wh, "select * from models").to_pylist()
    assert row["method"] == "tree-advantage"
    lineage = json.loads(row["lineage"])
    assert (lineage["run_id"], lineage["table"]) == (run_id, "trajectories")
    assert (Path(row["path"]) / "model.safetensors").is_file()

    assert_compared_with_base(root, engines, trained, tiny_model)


def test_prm_trains_on_the_builds_step_labels_and_rewards_a_grpo_run(treeps_build, tiny_model):  # noqa: F811
    """The PRM trains on the build's step_labels with one path held back and scored; GRPO then
    takes it as its ``prm`` reward (``latest:prm``), one score per completion."""
    root, run_id = treeps_build
    wh = Warehouse(root)
    labels = query(wh, "select count(*) as n from step_labels").to_pylist()[0]["n"]
    assert labels >= 2
    prm = train(
        TrainConfig(
            method="prm",
            run_id=run_id,
            base_model=tiny_model,
            warehouse={"root": str(root)},
            trl={"max_steps": 2, "per_device_train_batch_size": 2},
        )
    )
    assert prm["status"] == "trained" and prm["model_id"].startswith("prm-")
    assert prm["metrics"]["prm_heldout_steps"] >= 1 and 0.0 <= prm["metrics"]["prm_heldout_accuracy"] <= 1.0
    assert prm["metrics"]["n_rows"] == labels - len(
        heldout_ids(query(wh, "select label_id from step_labels").column("label_id").to_pylist(), 0.1)
    )
    grpo = train(
        TrainConfig(
            method="grpo",
            run_id=run_id,
            base_model=tiny_model,
            warehouse={"root": str(root)},
            rewards=["prm"],
            task="qa",
            trl={"max_steps": 1, "max_completion_length": 8, "per_device_train_batch_size": 2},
        )
    )
    assert grpo["status"] == "trained"
    assert 0.0 <= grpo["metrics"]["rewards/prm_min/mean"] <= 1.0
    methods = query(wh, "select method from models order by method").column("method").to_pylist()
    assert methods == ["grpo", "prm"]


def test_agentic_grpo_retrieves_from_the_builds_index(treeps_build, tiny_model, engines):  # noqa: F811
    """grpo-agentic through the flow: the build's BM25 index over its HotpotQA passages answers the
    rollouts, every rollout is logged, and the r3_process reward is among the logged rewards."""
    root, run_id = treeps_build
    trained = train(
        TrainConfig(
            method="grpo-agentic",
            run_id=run_id,
            base_model=tiny_model,
            warehouse={"root": str(root)},
            rewards=["answer_f1", "format", "r3_process"],
            options={"max_turns": 2},
            trl={"max_steps": 1, "max_completion_length": 16, "per_device_train_batch_size": 2},
        )
    )
    assert trained["status"] == "trained" and trained["model_id"].startswith("grpo-agentic-")
    assert {"rewards/answer_f1_reward/mean", "rewards/format_reward/mean", "rewards/r3_process/mean"} <= set(
        trained["metrics"]
    )
    [row] = query(Warehouse(root), "select * from models").to_pylist()
    assert (row["method"], json.loads(row["lineage"])["table"]) == ("grpo-agentic", "grpo_prompts")
    log = (Path(row["path"]) / "rollouts.jsonl").read_text().splitlines()
    assert len(log) == 2
    assert_compared_with_base(root, engines, trained, tiny_model)


def assert_compared_with_base(root: Path, engines, trained: dict, base: str) -> None:
    """``evaluate`` with ``compare``: eval_summary holds the trained model and its base on the same
    three questions (scripted engines by model: the trained one answers right, the base does not)."""
    [row] = query(
        Warehouse(root), "select path from models where model_id = $id", {"id": trained["model_id"]}
    ).to_pylist()
    backends = {
        str(Path(base).resolve()): ScriptedBackend(base_policy, fingerprint="base"),
        str(Path(row["path"]).resolve()): ScriptedBackend(trained_policy, fingerprint="trained"),
    }
    by_model = engines(lambda role, cache_dir: backends[str(Path(role.model).resolve())], name="scripted:by-model")
    summary = evaluate(
        EvalConfig.model_validate(
            {
                "model": trained["model_id"],
                "compare": base,
                "datasets": ["hotpotqa"],
                "limit": 3,
                "modes": ["direct"],
                "warehouse": {"root": str(root)},
                "llm": scripted_llm(by_model),
            }
        )
    )
    assert summary["status"] == "completed", summary
    rows = query(
        Warehouse(root),
        "select model_id, n_questions, em from eval_summary where model_id in ($a, $b) order by em",
        {"a": trained["model_id"], "b": str(Path(base).resolve())},
    ).to_pylist()
    assert [(r["n_questions"], r["em"]) for r in rows] == [(3, 0.0), (3, 1.0)]
    assert rows[1]["model_id"] == trained["model_id"]
