"""The reward functions a GRPO run names, built for the run (``tasks/rewards/__init__.py``).

A name is a stock reward (``tasks/rewards/functions.py``), one the caller passes ready-made
(``extra``), or one declared as a factory: by a strategy (its ``training`` module's ``REWARDS``,
``tasks/search/strategy.py``) or by a training method (its spec's ``rewards``: the ``prm``
method's trained step reward model). Only the
factories of the names asked for are built, once per run, in the order they are named.
"""

from __future__ import annotations

from collections.abc import Mapping

from ragfactory.tasks.rewards import RewardContext, RewardFactory, RewardFunc
from ragfactory.tasks.rewards.functions import reward_functions


def declared_rewards() -> dict[str, RewardFactory]:
    """Every reward factory by name: the strategies' and the training methods'."""
    from ragfactory.tasks.search.registry import STRATEGIES
    from ragfactory.tasks.training.methods import METHODS

    declared = STRATEGIES.declared("training", "REWARDS")
    for spec in METHODS.values():
        clash = sorted(set(spec.rewards) & set(declared))
        if clash:
            raise ValueError(f"method {spec.name!r} declares the rewards {clash} again")
        declared |= spec.rewards
    return declared


def run_rewards(ctx: RewardContext, extra: Mapping[str, RewardFunc] | None = None) -> list[RewardFunc]:
    """The reward functions ``ctx.rewards`` names: ``extra``'s as given, the others built."""
    ready = dict(extra or {})
    factories = declared_rewards()
    built = {
        name: factories[name](ctx) for name in dict.fromkeys(ctx.rewards) if name not in ready and name in factories
    }
    return reward_functions(ctx.rewards, {**built, **ready})
