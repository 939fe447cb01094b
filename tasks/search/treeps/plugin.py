"""TreePS-RAG as a registered strategy (``tasks/search/strategy.py``).

Its trees train on sampled root-to-leaf trajectories with process advantages, GRPO and verl
prompts, and stepwise process labels (004, §2.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragfactory.tasks.export.grpo import grpo_prompt_rows
from ragfactory.tasks.export.step_labels import step_label_rows
from ragfactory.tasks.export.trajectories import trajectory_rows
from ragfactory.tasks.export.verl import verl_rows
from ragfactory.tasks.search.strategy import ExportInputs, Exporter, Rows, ShardContext, Strategy
from ragfactory.tasks.search.tree import TableRows
from ragfactory.tasks.search.treeps.expansion import STRATEGY, TreePSConfig, expand_question


async def expand(question: Mapping[str, Any], context: ShardContext, config: TreePSConfig) -> TableRows:
    """One question's TreePS-RAG tree as ``nodes`` and ``rollouts`` rows."""
    tree = await expand_question(question, context.generator, context.retriever, config, context.run_id,
                                 context.run_seed)
    return tree.table_rows()


def trajectories(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return trajectory_rows(inputs["nodes"], config.trajectories, run_seed)


def grpo_prompts(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return grpo_prompt_rows(inputs["nodes"], inputs["questions"])


def verl_prompts(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return verl_rows(inputs["nodes"], inputs["questions"])


def step_labels(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return step_label_rows(inputs["nodes"], config.step_labels)


TREEPS = Strategy(
    name=STRATEGY,
    config_type=TreePSConfig,
    expand=expand,
    exporters=(
        Exporter("trajectories", ("nodes",), trajectories),
        Exporter("grpo_prompts", ("nodes", "questions"), grpo_prompts),
        Exporter("verl_prompts", ("nodes", "questions"), verl_prompts),
        Exporter("step_labels", ("nodes",), step_labels),
    ),
    valued=True,  # trajectories and step labels carry the nodes' advantages and values (§2.3)
)
