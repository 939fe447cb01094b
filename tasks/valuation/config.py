"""Parameters of the valuation stage: which strategies' trees get node values, from which outcome.

The ``valuation`` section of the build config (``flows/config.py``). The stage
(``tasks/valuate.py``) runs after expansion and before export: it reads each expansion shard's
``nodes``, fills ``visits``, ``value`` and ``advantage`` (``node_values.py``, TreePS-RAG §2.3) and
rewrites the shard. Its defaults value the trees of every strategy whose plug-in asks for values
(``Strategy.valued``: TreePS-RAG, whose trajectory and step-label exports read them) with the
reward the strategy scored.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragfactory.schemas.config import Section
from ragfactory.tasks.valuation.node_values import ValuationConfig


class ValuationSection(Section):
    """Which trees the valuation stage values, and with which leaf outcome."""

    strategies: list[str] | None = Field(
        None,
        description="Strategies (names in search.strategies) whose trees are valued; default those "
        "whose plug-in asks for values (TreePS-RAG's). [] values none; a strategy may value its own nodes as it searches",
    )
    metric: Literal["em", "f1", "cover_em"] | None = Field(
        ValuationConfig.metric,
        description="Leaf outcome: default the reward the strategy scored (EM for "
        "TreePS-RAG, §2.3); em, f1 or cover_em: that score from the leaf's parsed fields",
    )

    def params(self) -> ValuationConfig:
        return ValuationConfig(metric=self.metric)

    def values(self, strategy: str, valued_by_default: bool) -> bool:
        """Whether the stage values the trees of ``strategy`` (a ``search.strategies`` name)."""
        return valued_by_default if self.strategies is None else strategy in self.strategies
