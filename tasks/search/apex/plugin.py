"""APEX-Searcher as a registered strategy (``tasks/search/strategy.py``).

Each shard opens the SEPR plan scorer from ``search.apex.sepr`` (its embedding model is checked
by preflight); the trees and plans train the executor on correct runs (SFT) and the planner on
plans with their SEPR (GRPO) (APEX-Searcher, §2.3), with the exporters of ``exports.py``; its
views (``views/``) show plans beside their scores; ``evaluation.py`` adds the ``apex`` evaluation
mode, the plan-then-execute inference those exports train.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragfactory.tasks.rewards.sepr import PlanScorer, load_plan_scorer
from ragfactory.tasks.search.apex.config import STRATEGY, ApexConfig
from ragfactory.tasks.search.apex.expansion import run_apex_question
from ragfactory.tasks.search.apex.fates import explain
from ragfactory.tasks.search.strategy import ShardContext, Strategy
from ragfactory.tasks.search.tree import TableRows


async def expand(question: Mapping[str, Any], context: ShardContext, config: ApexConfig) -> TableRows:
    """One question planned, scored and executed: its ``nodes``, ``plans`` and ``plan_scores`` rows."""
    return await run_apex_question(
        question, context.generator, context.retriever, context.scorer, config, context.run_id, context.run_seed
    )


def open_scorer(config: ApexConfig, embeddings_dir: Path) -> PlanScorer:
    return load_plan_scorer(config.sepr, embeddings_dir)


def encoders(config: ApexConfig) -> dict[str, str]:
    return {"sepr.model": config.sepr.model}


APEX = Strategy(
    name=STRATEGY,
    config_type=ApexConfig,
    expand=expand,
    open_scorer=open_scorer,
    encoders=encoders,
    description="APEX-Searcher planning, SEPR and execution",
    explain=explain,
    exports=f"{__package__}.exports",
    training=f"{__package__}.training",
    evaluation=f"{__package__}.evaluation",
    views=Path(__file__).parent / "views",
    prompts=Path(__file__).parent / "prompts",
)
