"""ReasonRAG MCTS as a registered strategy (``tasks/search/strategy.py``).

Its trees feed step preference pairs and SFT examples (``exports.py``); its SQL views are in
``views/``. The search writes its own N and Q on every node, so the valuation stage leaves its
trees alone.
"""

from __future__ import annotations

from pathlib import Path

from ragfactory.tasks.search.mcts import teacher  # noqa: F401  (registers the world teacher engine)
from ragfactory.tasks.search.mcts.config import STRATEGY, MctsConfig
from ragfactory.tasks.search.mcts.expansion import expand
from ragfactory.tasks.search.mcts.fates import explain
from ragfactory.tasks.search.strategy import Strategy

MCTS = Strategy(
    name=STRATEGY,
    config_type=MctsConfig,
    expand=expand,
    description="ReasonRAG MCTS parameters (defaults and their sources in tasks/search/mcts/config.py)",
    explain=explain,
    exports=f"{__package__}.exports",
    evaluation=f"{__package__}.evaluation",
    views=Path(__file__).parent / "views",
    prompts=Path(__file__).parent / "prompts",
)
