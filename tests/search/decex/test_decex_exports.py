"""SFT and DPO exports on hand-built DecEx-RAG node rows (§2.3): edge cases and schemas."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.export.dpo import DpoConfig
from ragfactory.tasks.export.sft import SftConfig
from ragfactory.tasks.search.decex.exports import preference_pairs, sft_examples
from ragfactory.tasks.search.tree import QuestionTree
from tests.search.decex.decex_trees import QUESTIONS, small_tree


def test_sft_rows_fit_their_table_and_are_stable():
    rows = sft_examples(small_tree(), QUESTIONS)
    assert len(rows) == 1 and rows == sft_examples(small_tree(), QUESTIONS)
    assert rows[0]["messages"][1]["content"] == (
        "Step 1:\nSub-question: Which country?\nAnswer: France\n\nSo.\n<answer> Paris </answer>"
    )
    assert len(rows[0]["node_ids"]) == 4
    assert pa.Table.from_pylist(rows, schema=table_spec("sft_examples").schema).num_rows == 1


@pytest.mark.parametrize(
    "rows,config,n",
    [
        (small_tree(answer_value=0.4), SftConfig(min_reward=0.5), 0),
        (small_tree(answer_value=0.5), SftConfig(min_reward=0.5), 1),
        (small_tree(kept_answer=False), SftConfig(), 0),
    ],
)
def test_sft_keeps_only_kept_chains_above_min_reward(rows, config, n):
    assert len(sft_examples(rows, QUESTIONS, config)) == n


def test_sft_names_a_missing_question():
    with pytest.raises(ValueError, match="question 'q' of run 'r' is not in the questions given"):
        sft_examples(small_tree(), [{"question_id": "other", "question": "?"}])


def test_sft_refuses_a_chain_that_is_not_decex():
    tree = QuestionTree("r", "q", "decex")
    root = tree.add_root("Q?")
    tree.add_child(root, "x0", "plan", is_selected=True).parsed.update(answer="A")
    tree.add_child(tree.nodes[1], "a0", "answer", parsed={"answer": "A"}, value=1.0, is_selected=True)
    with pytest.raises(ValueError, match="is not a DecEx chain"):
        sft_examples(tree.node_rows(), QUESTIONS)


@pytest.mark.parametrize(
    "rows,config,n_pairs",
    [
        (small_tree(sub_values=(0.76, 0.75)), DpoConfig(), 1),  # a 0.01 gap in floats still counts
        (small_tree(sub_values=(0.755, 0.75)), DpoConfig(), 0),
        (small_tree(sub_values=(0.755, 0.75)), DpoConfig(min_gap=0.0), 1),
        (small_tree(sub_values=(0.9, 0.1), same_text=True), DpoConfig(), 0),  # identical texts
        (small_tree(sub_values=(0.1, 0.9)), DpoConfig(), 0),  # the pruned sibling was better
    ],
)
def test_dpo_gap_and_identical_text_filters(rows, config, n_pairs):
    assert len(preference_pairs(rows, QUESTIONS, config)) == n_pairs


def test_dpo_rows_fit_their_table():
    rows = preference_pairs(small_tree(sub_values=(0.9, 0.1)), QUESTIONS)
    assert [(r["decision"], r["gap"]) for r in rows] == [("execution", pytest.approx(0.8))]
    assert rows[0]["rejected"] == [{"role": "assistant", "content": "Step 1:\nSub-question: Which city?"}]
    assert pa.Table.from_pylist(rows, schema=table_spec("preference_pairs").schema).num_rows == 1


def test_dpo_config_refuses_unknown_labels():
    with pytest.raises(ValueError, match="unknown"):
        DpoConfig(labels=("decision", "style"))
