"""DecEx-RAG as a registered strategy (``tasks/search/strategy.py``).

Its trees train SFT on the best chains and DPO on sibling branches (000, §2.3); without pruning
(``no_pruning``, §4.1) it writes trees named ``decex_no_pruning`` beside ``decex``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragfactory.tasks.export.dpo import preference_pairs
from ragfactory.tasks.export.sft import sft_examples
from ragfactory.tasks.search.decex.config import STRATEGY, STRATEGY_NO_PRUNING, DecExConfig
from ragfactory.tasks.search.decex.expansion import expand_question
from ragfactory.tasks.search.strategy import ExportInputs, Exporter, Rows, ShardContext, Strategy
from ragfactory.tasks.search.tree import TableRows


async def expand(question: Mapping[str, Any], context: ShardContext, config: DecExConfig) -> TableRows:
    """One question's DecEx-RAG tree as ``nodes`` and ``rollouts`` rows."""
    tree = await expand_question(question, context.generator, context.retriever, config, context.run_id,
                                 context.run_seed)
    return tree.table_rows()


def sft_rows(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return sft_examples(inputs["nodes"], inputs["questions"], config.sft)


def dpo_rows(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return preference_pairs(inputs["nodes"], inputs["questions"], config.dpo)


DECEX = Strategy(
    name=STRATEGY,
    config_type=DecExConfig,
    expand=expand,
    exporters=(
        Exporter("sft_examples", ("nodes", "questions"), sft_rows),
        Exporter("preference_pairs", ("nodes", "questions"), dpo_rows),
    ),
    variants=(STRATEGY_NO_PRUNING,),
)
