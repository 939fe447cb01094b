"""DecEx-RAG as a registered strategy (``tasks/search/strategy.py``).

Without pruning (``no_pruning``, §4.1) it writes trees named ``decex_no_pruning`` beside
``decex``; its trees train SFT on the best chains and DPO on sibling branches (DecEx-RAG, §2.3), with
the exporters of ``exports.py``; that data trains the step loop ``evaluation.py`` adds as the
``decex`` evaluation mode, and ``teacher.py`` registers the seeded world's teacher engine for its
search (docs/world.md); its SQL views are in ``views/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragfactory.tasks.search.decex import teacher  # noqa: F401  (registers the world teacher engine)
from ragfactory.tasks.search.decex.config import STRATEGY, STRATEGY_NO_PRUNING, DecExConfig
from ragfactory.tasks.search.decex.expansion import expand_question
from ragfactory.tasks.search.decex.fates import explain
from ragfactory.tasks.search.strategy import ShardContext, Strategy
from ragfactory.tasks.search.tree import TableRows


async def expand(question: Mapping[str, Any], context: ShardContext, config: DecExConfig) -> TableRows:
    """One question's DecEx-RAG tree as ``nodes`` and ``rollouts`` rows."""
    tree = await expand_question(
        question, context.generator, context.retriever, config, context.run_id, context.run_seed
    )
    return tree.table_rows()


DECEX = Strategy(
    name=STRATEGY,
    config_type=DecExConfig,
    expand=expand,
    variants=(STRATEGY_NO_PRUNING,),
    description="DecEx-RAG parameters (paper defaults)",
    explain=explain,
    exports=f"{__package__}.exports",
    evaluation=f"{__package__}.evaluation",
    views=Path(__file__).parent / "views",
    prompts=Path(__file__).parent / "prompts",
)
