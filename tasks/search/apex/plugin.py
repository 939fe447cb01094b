"""APEX-Searcher as a registered strategy (``tasks/search/strategy.py``).

Each shard opens the SEPR plan scorer from ``search.apex.sepr`` (its embedding model is checked
by preflight); the trees and plans train the executor on correct runs (SFT) and the planner on
plans with their SEPR (GRPO) (002, §2.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragfactory.tasks.export.apex import executor_sft_examples, planner_grpo_prompts
from ragfactory.tasks.rewards.sepr import PlanScorer, load_plan_scorer
from ragfactory.tasks.search.apex.expansion import STRATEGY, ApexConfig, run_apex_question
from ragfactory.tasks.search.strategy import ExportInputs, Exporter, Rows, ShardContext, Strategy
from ragfactory.tasks.search.tree import TableRows


async def expand(question: Mapping[str, Any], context: ShardContext, config: ApexConfig) -> TableRows:
    """One question planned, scored and executed: its ``nodes``, ``plans`` and ``plan_scores`` rows."""
    return await run_apex_question(question, context.generator, context.retriever, context.scorer, config,
                                   context.run_id, context.run_seed)


def open_scorer(config: ApexConfig, embeddings_dir: Path) -> PlanScorer:
    return load_plan_scorer(config.sepr, embeddings_dir)


def encoders(config: ApexConfig) -> dict[str, str]:
    return {"sepr.model": config.sepr.model}


def executor_sft(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return executor_sft_examples(inputs["nodes"], inputs["questions"], config.apex)


def planner_grpo(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return planner_grpo_prompts(inputs["plans"], inputs["plan_scores"], inputs["questions"], config.apex)


APEX = Strategy(
    name=STRATEGY,
    config_type=ApexConfig,
    expand=expand,
    exporters=(
        Exporter("sft_examples", ("nodes", "questions"), executor_sft),
        Exporter("grpo_prompts", ("plans", "plan_scores", "questions"), planner_grpo),
    ),
    open_scorer=open_scorer,
    encoders=encoders,
)
