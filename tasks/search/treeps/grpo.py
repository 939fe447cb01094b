"""GRPO prompts for TRL from TreePS-RAG trees (§2.3 "Policy Optimization"; docs/architecture.md, "Exports").

TreePS-RAG trains online: the trainer needs each question's prompt and what its rollouts are
scored against, not the trees. A ``grpo_prompts`` row is TRL's conversational prompt-only
format, ``prompt`` = [{"role": "user", "content": …}] (the Search-R1 template the tree was
expanded with), plus ``golden_answers``, which ``GRPOTrainer`` passes to the reward function
by name, and the question and root node ids. ``task`` is "qa": the reward is answer matching. ``prompt_token_ids`` are the prompt's ids as the
engine rendered them for the root's first steps (``tasks/llm/splice.py``), null where no call
recorded them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ragfactory.tasks.llm.splice import prompt_tokens
from ragfactory.tasks.search.tree import RowTree, group_trees, stable_id
from ragfactory.tasks.search.treeps.trajectories import tree_prompt

TASK = "qa"


def question_rows(questions: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """question_id -> ``questions`` row, each with its golden answers."""
    rows = {}
    for i, row in enumerate(questions):
        if row.get("question_id") is None or row.get("golden_answers") is None:
            raise ValueError(f"questions row {i} needs question_id and golden_answers, got {sorted(row)}")
        rows[str(row["question_id"])] = row
    return rows


def tree_question(rows: Mapping[str, Mapping[str, Any]], tree: RowTree) -> Mapping[str, Any]:
    if tree.question_id not in rows:
        raise ValueError(f"question {tree.question_id!r} of run {tree.run_id!r} is not in the questions given")
    return rows[tree.question_id]


def golden_list(question: Mapping[str, Any]) -> list[str]:
    golden = question["golden_answers"]
    return [golden] if isinstance(golden, str) else [str(g) for g in golden]


def root_id(tree: RowTree) -> str:
    return tree.children(None)[0]["node_id"]


def root_prompt_tokens(tree: RowTree, calls: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The token ids of the prompt the root was expanded with, as its first steps' calls sent it."""
    return prompt_tokens([child.get("llm_call_id") for child in tree.children(root_id(tree))], calls)


def grpo_prompt_rows(
    nodes_rows: Iterable[Mapping[str, Any]],
    questions: Iterable[Mapping[str, Any]],
    calls: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One ``grpo_prompts`` row per question tree in ``nodes_rows``, with the prompt's token ids
    from ``calls`` (call_id -> ``llm_calls`` row)."""
    by_id = question_rows(questions)
    rows = []
    for tree in group_trees(nodes_rows).values():
        question = tree_question(by_id, tree)
        rows.append(
            {
                "prompt_id": stable_id("grpo", tree.run_id, tree.question_id, tree.strategy),
                "run_id": tree.run_id,
                "question_id": tree.question_id,
                "strategy": tree.strategy,
                "task": TASK,
                "prompt": [{"role": "user", "content": tree_prompt(tree)}],
                "golden_answers": golden_list(question),
                "gold_plan": None,
                "node_ids": [root_id(tree)],
                **root_prompt_tokens(tree, calls or {}),
            }
        )
    return rows
