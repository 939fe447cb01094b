"""ReasonRAG's training data from MCTS trees (§2.2.3): step preference pairs and SFT.

- ``preference_pairs``: per state, the best step against the worst among those on a path to an
  answer (``tasks/search/mcts/pairs.py``), dropping gaps under ``dpo.min_gap`` and identical
  texts; ``decision`` is the pair's stage (query / evidence / answer). The prompt is the stage's
  system prompt and user turn at that state (Figs. 12-13 and the step format of
  ``tasks/search/mcts/steps.py``), so a DPO step trains exactly the turn the policy sees.
- ``sft_examples``: the best answer's path (highest value, the first generated on a tie) when
  its F1 reaches ``sft.min_reward``, one example per step with that step's prompt.

``EXPORTS`` declares both with the columns they read (``tasks/export/registry.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ragfactory.tasks.export.dpo import DpoConfig
from ragfactory.tasks.export.registry import Exporter, ExportInputs, Rows, StrategyExports, tree_columns
from ragfactory.tasks.export.sft import SftConfig, question_text, question_texts
from ragfactory.tasks.prompts.loader import render_prompt
from ragfactory.tasks.search.common import hits_from_records
from ragfactory.tasks.search.mcts.config import STRATEGY
from ragfactory.tasks.search.mcts.pairs import step_pairs
from ragfactory.tasks.search.mcts.steps import REASONING, grounding_input, reasoning_input
from ragfactory.tasks.search.tree import RowTree, group_trees, path_key, stable_id


def step_prompt(tree: RowTree, question: str, step: Mapping[str, Any]) -> list[dict[str, str]]:
    """The system and user turns the policy saw when it generated ``step``."""
    chain = tree.chain(step["parent_id"])[1:]  # the steps before it, root excluded
    thoughts = [row["text"] for row in chain]
    if step["parsed"].get("stage", REASONING) == REASONING:
        return [
            {"role": "system", "content": render_prompt("reasonrag_reasoning", answer_format="answer")},
            {"role": "user", "content": reasoning_input(question, thoughts)},
        ]
    hits = hits_from_records(chain[-1]["parsed"].get("hits")) if chain else []
    return [
        {"role": "system", "content": render_prompt("reasonrag_grounding")},
        {"role": "user", "content": grounding_input(question, thoughts, hits)},
    ]


def _steps(tree: RowTree) -> list[dict[str, Any]]:
    """The valued, well-formed steps in path order, with whether their rollouts reached an answer."""
    rows = sorted(tree.rows.values(), key=lambda r: path_key(r["path"]))
    return [
        {**r, "reached_answer": bool(r["parsed"].get("reached_answer"))}
        for r in rows
        if r["kind"] != "question" and not r["is_format_error"] and r["value"] is not None
    ]


def mcts_preference_pairs(
    nodes: Iterable[Mapping[str, Any]], questions: Iterable[Mapping[str, Any]], config: DpoConfig = DpoConfig()
) -> list[dict[str, Any]]:
    """``preference_pairs`` rows of every MCTS tree in ``nodes`` (module docstring)."""
    texts, rows = question_texts(questions), []
    for tree in group_trees(nodes).values():
        question = question_text(texts, tree)
        for pair in step_pairs(_steps(tree), min_gap=config.min_gap):
            chosen, rejected = tree.rows[pair.chosen], tree.rows[pair.rejected]
            rows.append(
                {
                    "pair_id": stable_id("mcts-pair", tree.run_id, pair.chosen, pair.rejected),
                    "run_id": tree.run_id,
                    "question_id": tree.question_id,
                    "strategy": tree.strategy,
                    "decision": pair.stage,
                    "prompt": step_prompt(tree, question, chosen),
                    "chosen": [{"role": "assistant", "content": chosen["text"]}],
                    "rejected": [{"role": "assistant", "content": rejected["text"]}],
                    "chosen_value": chosen["value"],
                    "rejected_value": rejected["value"],
                    "gap": pair.gap,
                    "chosen_node_id": pair.chosen,
                    "rejected_node_id": pair.rejected,
                }
            )
    return rows


def mcts_sft_examples(
    nodes: Iterable[Mapping[str, Any]], questions: Iterable[Mapping[str, Any]], config: SftConfig = SftConfig()
) -> list[dict[str, Any]]:
    """``sft_examples`` rows: each step of every tree's best answer path (module docstring)."""
    texts, rows = question_texts(questions), []
    for tree in group_trees(nodes).values():
        answers = [r for r in _steps(tree) if r["kind"] == "answer" and (r["reward"] or 0) >= config.min_reward]
        if not answers:
            continue
        best = max(answers, key=lambda r: r["value"])  # max keeps the first of equal values
        question = question_text(texts, tree)
        chain = tree.chain(best["node_id"])[1:]
        for i, step in enumerate(chain):
            rows.append(
                {
                    "example_id": stable_id("mcts-sft", tree.run_id, tree.question_id, step["node_id"]),
                    "run_id": tree.run_id,
                    "question_id": tree.question_id,
                    "strategy": tree.strategy,
                    "messages": step_prompt(tree, question, step) + [{"role": "assistant", "content": step["text"]}],
                    "node_ids": [row["node_id"] for row in chain[: i + 1]],
                }
            )
    return rows


def _sft(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return mcts_sft_examples(inputs["nodes"], inputs["questions"], config.sft)


def _dpo(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return mcts_preference_pairs(inputs["nodes"], inputs["questions"], config.dpo)


_QUESTIONS = ("question_id", "question")
_STEP_NODES = tree_columns("text", "parsed", "is_format_error", "value")
EXPORTS = StrategyExports(
    STRATEGY,
    (
        Exporter("sft_examples", {"nodes": (*_STEP_NODES, "reward"), "questions": _QUESTIONS}, _sft),
        Exporter("preference_pairs", {"nodes": _STEP_NODES, "questions": _QUESTIONS}, _dpo),
    ),
)
