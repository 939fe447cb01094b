"""TreePS-RAG as a registered strategy (``tasks/search/strategy.py``).

Its trees train on sampled root-to-leaf trajectories with process advantages, GRPO and verl prompts,
and stepwise process labels (TreePS-RAG, §2.3), with the exporters of ``exports.py`` (its SQL views
are in ``views/``); those read node values, so the build's valuation stage values its trees.
``evaluation.py`` adds the step loop those trajectories train as the ``treeps`` evaluation mode;
``teacher.py`` registers the seeded world's teacher engine for its search (docs/world.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragfactory.tasks.search.strategy import ShardContext, Strategy
from ragfactory.tasks.search.tree import TableRows
from ragfactory.tasks.search.treeps import teacher  # noqa: F401  (registers the world teacher engine)
from ragfactory.tasks.search.treeps.config import STRATEGY, TreePSConfig
from ragfactory.tasks.search.treeps.expansion import expand_question
from ragfactory.tasks.search.treeps.fates import explain


async def expand(question: Mapping[str, Any], context: ShardContext, config: TreePSConfig) -> TableRows:
    """One question's TreePS-RAG tree as ``nodes`` and ``rollouts`` rows."""
    tree = await expand_question(
        question, context.generator, context.retriever, config, context.run_id, context.run_seed
    )
    return tree.table_rows()


TREEPS = Strategy(
    name=STRATEGY,
    config_type=TreePSConfig,
    expand=expand,
    valued=True,  # trajectories and step labels carry the nodes' advantages and values (§2.3)
    description="TreePS-RAG parameters (paper defaults)",
    explain=explain,
    exports=f"{__package__}.exports",
    evaluation=f"{__package__}.evaluation",
    views=Path(__file__).parent / "views",
    prompts=Path(__file__).parent / "prompts",
)
