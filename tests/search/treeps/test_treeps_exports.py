"""TreePS-RAG exports: trajectories, GRPO prompts, verl parquet and stepwise labels (§2.3).

Trees come from the scripted ``mixed`` policy of tests/search/treeps/treeps_scenario.py: by sample index
a right answer, a wrong one, a search and a malformed step, so each question's tree has 26
leaves (6 per layer and 2 forced at depth 4) and 8 right answers.
"""

from __future__ import annotations

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.export.verl import write_verl_parquet
from ragfactory.tasks.llm.seeds import derive_seed
from ragfactory.tasks.search.treeps.exports import verl_rows
from ragfactory.tasks.search.treeps.grpo import grpo_prompt_rows
from ragfactory.tasks.search.treeps.step_labels import StepLabelConfig, step_label_rows
from ragfactory.tasks.search.treeps.steps import initial_prompt
from ragfactory.tasks.search.treeps.trajectories import SAMPLE_PATH, TrajectoryConfig, trajectory_rows
from tests.search.decex.jaws_scenario import expand as expand_jaws
from tests.search.treeps.treeps_scenario import QUESTIONS, build, mixed

QUESTION_ROWS = [dict(q, dataset="hotpotqa", split="train") for q in QUESTIONS]


@pytest.fixture(scope="module")
def nodes():
    trees, _, _ = build(mixed)
    return [row for tree in trees for row in tree.node_rows()]


@pytest.fixture(scope="module")
def trajectories(nodes):
    return trajectory_rows(nodes, run_seed=11)


def load(warehouse, table, rows):
    path = warehouse.write(table, rows, "treeps")
    return datasets.load_dataset(
        "parquet", data_files=str(path), split="train", cache_dir=str(warehouse.root / "hf-cache")
    )


def test_every_root_to_leaf_path_is_a_trajectory_with_the_nodes_advantages(nodes, trajectories):
    by_id = {row["node_id"]: row for row in nodes}
    assert len(trajectories) == sum(row["is_leaf"] for row in nodes) == 52
    for row in trajectories:
        steps = [by_id[n] for n in row["node_ids"][1:]]
        assert row["advantages"] == [s["advantage"] for s in steps]
        assert [s["advantage"] for s in row["step_spans"]] == row["advantages"]
        assert row["reward"] == by_id[row["leaf_node_id"]]["reward"]
        for span, step in zip(row["step_spans"], steps):
            assert row["response"][span["char_start"] : span["char_end"]] == step["text"]
        searches = [s for s in steps if s["kind"] == "sub_query"]
        assert len(row["observation_spans"]) == len(searches)
        for span, _search in zip(row["observation_spans"], searches):
            block = row["response"][span["char_start"] : span["char_end"]]
            assert block.startswith("\n\n<information>Doc 1(Title: T)") and block.endswith("</information>\n\n")
            assert all(f"Title: T) text {i}" in block for i in range(3))


def test_a_hand_checked_trajectory(trajectories):
    row = next(r for r in trajectories if r["question_id"] == "q0" and r["n_steps"] == 3 and r["reward"] == 1.0)
    search = "<reason>Look it up.</reason> <search> {}|2 </search>"
    docs = "".join(f"Doc {i + 1}(Title: T) text {i}\n" for i in range(3))
    observation = f"\n\n<information>{docs}</information>\n\n"
    answer = "<reason>Known.</reason> <answer> Paris </answer>"
    expected = search.format("q") + observation + search.format("q/s2") + observation + answer
    assert row["response"] == expected
    assert [m["role"] for m in row["messages"]] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert row["messages"][0] == row["prompt"][0]
    assert row["prompt"][0]["content"] == initial_prompt("Capital of country 0?", "treeps_step")
    assert row["messages"][2]["content"] == f"<information>{docs}</information>"


def test_n_trajectories_per_question_are_sampled_with_a_recorded_seed(nodes, trajectories):
    for question_id in ("q0", "q1"):
        rows = [r for r in trajectories if r["question_id"] == question_id]
        assert sum(r["is_sampled"] for r in rows) == 8
        assert {r["sample_seed"] for r in rows} == {derive_seed(11, question_id, SAMPLE_PATH)}
    assert trajectory_rows(nodes, run_seed=11) == trajectories
    other = trajectory_rows(nodes, run_seed=12)
    assert [r["is_sampled"] for r in other] != [r["is_sampled"] for r in trajectories]
    assert all(r["is_sampled"] for r in trajectory_rows(nodes, TrajectoryConfig(n_samples=None)))
    assert all(r["is_sampled"] for r in trajectory_rows(nodes, TrajectoryConfig(n_samples=26)))


def test_trajectories_round_trip_through_the_warehouse_and_datasets(warehouse, trajectories):
    loaded = load(warehouse, "trajectories", trajectories)
    assert loaded.num_rows == 52
    first = loaded[0]
    assert first["advantages"] == pytest.approx(trajectories[0]["advantages"])
    assert first["step_spans"][0].keys() == {"node_id", "char_start", "char_end", "advantage"}
    assert first["messages"] == trajectories[0]["messages"]


def test_grpo_prompts_hold_the_prompt_answers_and_root(warehouse, nodes):
    rows = grpo_prompt_rows(nodes, QUESTION_ROWS)
    assert [r["question_id"] for r in rows] == ["q0", "q1"]
    root = next(n for n in nodes if n["question_id"] == "q1" and n["parent_id"] is None)
    assert rows[1]["prompt"] == [{"role": "user", "content": initial_prompt("Capital of country 1?", "treeps_step")}]
    assert (rows[1]["golden_answers"], rows[1]["node_ids"], rows[1]["task"]) == (["Paris"], [root["node_id"]], "qa")
    loaded = load(warehouse, "grpo_prompts", rows)
    assert loaded[1]["prompt"] == rows[1]["prompt"] and loaded[1]["golden_answers"] == ["Paris"]


VERL_TYPES = {
    "data_source": pa.string(),
    "prompt": pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
    "ability": pa.string(),
    "reward_model": pa.struct(
        [("style", pa.string()), ("ground_truth", pa.struct([("target", pa.list_(pa.string()))]))]
    ),
    "extra_info": pa.struct(
        [
            ("split", pa.string()),
            ("index", pa.int64()),
            ("question_id", pa.string()),
            ("run_id", pa.string()),
            ("strategy", pa.string()),
            ("node_ids", pa.list_(pa.string())),
        ]
    ),
}


def test_verl_parquet_has_the_five_search_r1_fields(tmp_path, warehouse, nodes):
    rows = verl_rows(nodes, QUESTION_ROWS)
    path = write_verl_parquet(rows, tmp_path / "verl" / "train.parquet")
    schema = pq.read_schema(path)
    assert {name: schema.field(name).type for name in schema.names} == VERL_TYPES
    loaded = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf-cache"))
    row = loaded[0]
    assert row["data_source"] == "searchR1_hotpotqa" and row["ability"] == "fact-reasoning"
    assert row["prompt"] == [{"role": "user", "content": initial_prompt("Capital of country 0?", "treeps_step")}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": {"target": ["Paris"]}}
    root = next(n for n in nodes if n["question_id"] == "q0" and n["parent_id"] is None)
    assert row["extra_info"] == {
        "split": "train",
        "index": 0,
        "question_id": "q0",
        "run_id": "run",
        "strategy": "treeps",
        "node_ids": [root["node_id"]],
    }
    assert load(warehouse, "verl_prompts", rows).num_rows == 2


@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_step_labels_mark_steps_whose_value_clears_the_threshold(warehouse, nodes, threshold):
    rows = step_label_rows(nodes, StepLabelConfig(threshold=threshold))
    by_id = {n["node_id"]: n for n in nodes}
    assert len(rows) == 52
    for row in rows:
        steps = [by_id[n] for n in row["node_ids"]]
        assert row["step_values"] == [s["value"] for s in steps]
        assert row["labels"] == [s["value"] > threshold for s in steps]
        assert len(row["completions"]) == len(steps)
        for text, step in zip(row["completions"], steps):
            assert text.startswith(step["text"])
            assert ("\n\n<information>Doc 1" in text) == (step["kind"] == "sub_query")
    labels = [label for row in rows for label in row["labels"]]
    assert any(labels) and not all(labels)
    loaded = load(warehouse, "step_labels", rows)
    assert loaded[0]["labels"] == rows[0]["labels"] and isinstance(loaded[0]["prompt"], str)


def test_exports_without_observations_and_before_valuation(nodes):
    rows = step_label_rows(nodes, StepLabelConfig(with_observations=False))
    assert not any("<information>" in text for row in rows for text in row["completions"])
    unvalued = [dict(n, value=None, advantage=None) for n in nodes]
    with pytest.raises(ValueError, match="has no value; run valuation"):
        step_label_rows(unvalued)
    with pytest.raises(ValueError, match="has no advantage; run valuation"):
        trajectory_rows(unvalued)


def test_a_decex_tree_is_refused_by_name():
    rows = expand_jaws()[0].node_rows()
    with pytest.raises(ValueError, match="records no prompt; is it a TreePS-RAG tree"):
        trajectory_rows(rows)


def test_a_question_missing_from_the_questions_is_named(nodes):
    with pytest.raises(ValueError, match="question 'q1' of run 'run' is not in the questions given"):
        grpo_prompt_rows(nodes, QUESTION_ROWS[:1])


@pytest.mark.parametrize("table", ["trajectories", "step_labels", "verl_prompts"])
def test_new_tables_are_partitioned_by_run(table):
    spec = table_spec(table)
    assert spec.partition_by == ("run_id",) and "run_id" in spec.schema.names
