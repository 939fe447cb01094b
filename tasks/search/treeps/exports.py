"""TreePS-RAG's training data (§2.3), declared with the columns each exporter reads
(``EXPORTS``): sampled root-to-leaf trajectories with process advantages (``trajectories.py``),
GRPO prompts (``grpo.py``), verl prompts (the file format of ``tasks/export/verl.py``) and
stepwise process labels (``step_labels.py``). They read node values, which the build's valuation
stage fills in. ``EXPORT_CONFIG`` adds the ``export.trajectories`` and ``export.step_labels``
sections.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ragfactory.tasks.export.registry import Exporter, ExportInputs, Rows, StrategyExports, tree_columns
from ragfactory.tasks.export.verl import ABILITY, ANSWER_TAG, REWARD_STYLE, data_source
from ragfactory.tasks.llm.splice import CALL_COLUMNS, calls_by_id
from ragfactory.tasks.search.tree import RowTree, group_trees, stable_id
from ragfactory.tasks.search.treeps.config import STRATEGY
from ragfactory.tasks.search.treeps.grpo import (
    golden_list,
    grpo_prompt_rows,
    question_rows,
    root_id,
    root_prompt_tokens,
    tree_question,
)
from ragfactory.tasks.search.treeps.step_labels import StepLabelConfig, step_label_rows
from ragfactory.tasks.search.treeps.trajectories import TrajectoryConfig, trajectory_rows, tree_prompt


def _user_prompt(tree: RowTree) -> str:
    text = tree_prompt(tree)
    if ANSWER_TAG not in text:
        raise ValueError(
            f"question {tree.question_id!r}: the prompt does not ask for {ANSWER_TAG}…"
            "</answer>, which verl's Search-R1 reward parses"
        )
    return text


def verl_rows(
    nodes_rows: Iterable[Mapping[str, Any]],
    questions: Iterable[Mapping[str, Any]],
    calls: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One ``verl_prompts`` row per question tree in ``nodes_rows``, indexed in tree order, with
    the prompt's token ids from ``calls`` (call_id -> ``llm_calls`` row) where they were recorded."""
    by_id = question_rows(questions)
    rows = []
    for index, tree in enumerate(group_trees(nodes_rows).values()):
        question = tree_question(by_id, tree)
        rows.append(
            {
                "prompt_id": stable_id("verl", tree.run_id, tree.question_id, tree.strategy),
                "run_id": tree.run_id,
                "question_id": tree.question_id,
                "data_source": data_source(question.get("dataset")),
                "prompt": [{"role": "user", "content": _user_prompt(tree)}],
                "ability": ABILITY,
                "reward_model": {"style": REWARD_STYLE, "ground_truth": {"target": golden_list(question)}},
                "extra_info": {
                    "split": question.get("split"),
                    "index": index,
                    "question_id": tree.question_id,
                    "run_id": tree.run_id,
                    "strategy": tree.strategy,
                    "node_ids": [root_id(tree)],
                },
                **root_prompt_tokens(tree, calls or {}),
            }
        )
    return rows


def _trajectories(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return trajectory_rows(inputs["nodes"], config.trajectories, run_seed, calls_by_id(inputs["llm_calls"]))


def _grpo(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return grpo_prompt_rows(inputs["nodes"], inputs["questions"], calls_by_id(inputs["llm_calls"]))


def _verl(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return verl_rows(inputs["nodes"], inputs["questions"], calls_by_id(inputs["llm_calls"]))


def _step_labels(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return step_label_rows(inputs["nodes"], config.step_labels)


EXPORT_CONFIG = {
    "trajectories": ("Sampled root-to-leaf paths (TreePS)", TrajectoryConfig),
    "step_labels": ("Stepwise process labels for PRMs (TreePS)", StepLabelConfig),
}
# what each exporter reads of ``nodes`` beyond the tree: the steps' text and parsed fields, the calls
# behind them (token ids), and the leaves' rewards with the node advantages or values
_PROMPT_NODES = tree_columns("text", "parsed", "llm_call_id")
_TRAJECTORY_NODES = tree_columns("text", "parsed", "llm_call_id", "is_leaf", "reward", "advantage")
_LABEL_NODES = tree_columns("text", "parsed", "is_leaf", "reward", "value")
EXPORTS = StrategyExports(
    STRATEGY,
    (
        Exporter("trajectories", {"nodes": _TRAJECTORY_NODES, "llm_calls": CALL_COLUMNS}, _trajectories),
        Exporter(
            "grpo_prompts",
            {"nodes": _PROMPT_NODES, "questions": ("question_id", "golden_answers"), "llm_calls": CALL_COLUMNS},
            _grpo,
        ),
        Exporter(
            "verl_prompts",
            {
                "nodes": _PROMPT_NODES,
                "llm_calls": CALL_COLUMNS,
                "questions": ("question_id", "dataset", "split", "golden_answers"),
            },
            _verl,
        ),
        Exporter("step_labels", {"nodes": _LABEL_NODES}, _step_labels),
    ),
)
