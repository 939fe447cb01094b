"""SFT, DPO and GRPO on the embedded SmolLM2 with the DecEx exports of the Jaws tree (slow, CPU).

The exports come from the hand-worked Jaws tree (tests/search/decex/jaws_scenario.py), written to the
warehouse; they read with ``datasets.load_dataset("parquet")`` as any TRL job would, and one
step each runs through the same functions the train flow calls (TRL's SFTTrainer, DPOTrainer
and GRPOTrainer): the loss is finite, the saved weights differ from the base, and the saved
folder loads back. GRPO trains the answer prompts with the answer rewards and the APEX planner
prompt (a gold plan of the same question) with SEPR.
"""

from __future__ import annotations

import math

import pytest

from ragfactory.flows.config import TrainConfig
from ragfactory.tasks.search.apex.exports import planner_grpo_prompts
from ragfactory.tasks.search.decex.exports import preference_pairs, sft_examples
from ragfactory.tasks.search.treeps.grpo import grpo_prompt_rows
from ragfactory.tasks.training.runs import plan_training, train_planned
from ragfactory.tasks.training.trainers import load_model
from ragfactory.warehouse.store import Warehouse
from tests.search.decex.jaws_scenario import QUESTION, expand
from tests.search.treeps.treeps_scenario import QUESTIONS as TREEPS_QUESTIONS
from tests.search.treeps.treeps_scenario import build as build_treeps
from tests.search.treeps.treeps_scenario import mixed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def jaws_warehouse(tmp_path_factory):
    tree, *_ = expand()
    nodes = tree.node_rows()
    trees, _, _ = build_treeps(mixed)
    treeps_nodes = [row for tree in trees for row in tree.node_rows()]
    wh = Warehouse(tmp_path_factory.mktemp("wh"))
    gold_plan = {
        "run_id": "jaws",
        "question_id": "jaws",
        "plan_id": "jaws-gold",
        "source": "gold",
        "steps": [
            {"step": 1, "question": "Who directed Jaws?", "original": "Who directed Jaws?"},
            {"step": 2, "question": "Who is the mother of #1?", "original": "Who is the mother of #1?"},
        ],
    }
    for table, rows in (
        ("sft_examples", sft_examples(nodes, [QUESTION])),
        ("preference_pairs", preference_pairs(nodes, [QUESTION])),
        (
            "grpo_prompts",
            grpo_prompt_rows(treeps_nodes, TREEPS_QUESTIONS) + planner_grpo_prompts([gold_plan], [], [QUESTION]),
        ),
    ):
        rows = [{**row, "run_id": "jaws"} for row in rows]
        wh.write(table, rows, "decex")
    return wh


@pytest.mark.parametrize(
    "table, columns",
    [("sft_examples", ["messages"]), ("preference_pairs", ["prompt", "chosen", "rejected"])],
)
def test_exports_load_with_datasets_in_trl_shape(jaws_warehouse, table, columns):
    import datasets

    files = [str(path) for path in jaws_warehouse.files(table)]
    data = datasets.load_dataset("parquet", data_files=files, split="train").select_columns(columns)
    assert data.num_rows > 0
    assert data[0][columns[-1]][-1]["role"] == "assistant"


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_embedded_model_trains_one_step(method, jaws_warehouse, embedded_model, log):
    config = TrainConfig(
        method=method,
        run_id="jaws",
        base_model=str(embedded_model),
        trl={"max_steps": 1, "per_device_train_batch_size": 1, "learning_rate": 1e-5, "max_length": 512},
    )
    plan = plan_training(jaws_warehouse, config)
    metrics = train_planned(jaws_warehouse, config, plan, log)
    assert math.isfinite(metrics["train_loss"]) and metrics["global_step"] == 1
    trained, _ = load_model(plan.output_dir)
    base, _ = load_model(embedded_model)
    base_params = dict(base.named_parameters())
    assert any(not p.equal(base_params[n]) for n, p in trained.named_parameters())


def length_spread(prompts, completions, **columns):
    """Differs between completions: a 135M model rarely earns an answer or plan reward in one
    step, and with equal rewards GRPO's advantage (and so its update) is zero."""
    return [len(str(c)) / 1000 for c in completions]


@pytest.mark.parametrize("task, rewards", [("qa", ["answer_f1", "format"]), ("plan", ["sepr"])])
def test_embedded_model_trains_one_grpo_step(task, rewards, jaws_warehouse, embedded_model, log):
    config = TrainConfig(
        method="grpo",
        run_id="jaws",
        task=task,
        base_model=str(embedded_model),
        rewards=[*rewards, "length_spread"],
        trl={
            "max_steps": 1,
            "per_device_train_batch_size": 2,
            "num_generations": 2,
            "max_completion_length": 24,
            "learning_rate": 1e-5,
        },
    )
    plan = plan_training(jaws_warehouse, config)
    metrics = train_planned(jaws_warehouse, config, plan, log, extra_rewards={"length_spread": length_spread})
    assert math.isfinite(metrics["train_loss"]) and metrics["global_step"] == 1
    for name in rewards:
        mean = metrics[f"rewards/{name}_reward/mean"]
        assert 0.0 <= mean <= 1.0, (name, mean)
    trained, _ = load_model(plan.output_dir)
    base, _ = load_model(embedded_model)
    base_params = dict(base.named_parameters())
    assert any(not p.equal(base_params[n]) for n, p in trained.named_parameters())
