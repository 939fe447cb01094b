"""The registered strategies: one line per strategy (its plug-in in ``<name>/plugin.py``).

The build's wrappers, the shard runner and the export task find strategies here by name; a
test adds a toy one with ``STRATEGIES.registered(...)`` for as long as it runs.
"""

from __future__ import annotations

from ragfactory.tasks.search.apex.plugin import APEX
from ragfactory.tasks.search.decex.plugin import DECEX
from ragfactory.tasks.search.mcts.plugin import MCTS
from ragfactory.tasks.search.r3.plugin import R3
from ragfactory.tasks.search.strategy import Registry
from ragfactory.tasks.search.treeps.plugin import TREEPS

STRATEGIES = Registry(
    [
        DECEX,
        TREEPS,
        APEX,
        MCTS,
        R3,
    ]
)
