"""What APEX-Searcher's data trains with: SEPR as a GRPO reward on the planner's prompts (§2.2.1).

``sepr_reward`` scores the plan the planner's parser (``plan_format.py``) reads from a completion
against the row's ``gold_plan`` (JSON text, as ``grpo_prompts.gold_plan`` stores it) with the
plan scorer of ``tasks/rewards/sepr.py``; ``REWARDS`` registers it as ``sepr``, its scorer built
once per run with its embeddings cached in the warehouse. This module belongs to the training
part: the strategy names it (``plugin.py``), the training's reward lookup loads it.

>>> from functools import partial
>>> from ragfactory.tasks.rewards.embedding_cache import EmbeddingCache, HashingEmbedder
>>> from ragfactory.tasks.rewards.sepr import PlanScorer
>>> reward = partial(sepr_reward, scorer=PlanScorer(EmbeddingCache(HashingEmbedder())))
>>> gold = '["Who directed Jaws?", "Who is the mother of #1?"]'
>>> completions = ["<plan>\\n1. Who directed Jaws?\\n2. Who is the mother of #1?\\n</plan>",
...                "<plan>\\n1. Who directed Jaws?\\n</plan>", "I cannot plan this."]
>>> [round(r, 3) for r in reward(prompts=["..."] * 3, completions=completions, gold_plan=[gold] * 3)]
[1.0, 0.667, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragfactory.tasks.rewards import RewardContext, RewardFunc
from ragfactory.tasks.rewards.functions import last_message_text
from ragfactory.tasks.search.apex.plan_format import MAX_STEPS, parse_plan, plan_texts

if TYPE_CHECKING:  # SEPR loads scipy and an encoder: only a plan reward needs it
    from ragfactory.tasks.rewards.sepr import PlanScorer


def sepr_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    gold_plan: Sequence[Any] | None = None,
    *,
    scorer: PlanScorer,
    max_steps: int = MAX_STEPS,
    **columns: Any,
) -> list[float]:
    """SEPR of each completion's plan against its row's gold plan (a TRL reward function).

    ``gold_plan`` is the dataset column (JSON text or a list per row); the other columns TRL
    passes are ignored. A malformed plan scores 0.0.
    """
    if gold_plan is None or len(gold_plan) != len(completions):
        raise ValueError(
            f"sepr_reward needs a gold_plan column with one value per completion "
            f"({len(completions)}), got {None if gold_plan is None else len(gold_plan)}"
        )
    rewards = [0.0] * len(completions)
    pairs, slots = [], []
    for i, (completion, gold) in enumerate(zip(completions, gold_plan)):
        try:
            gold_texts = plan_texts(gold)
        except ValueError as exc:
            raise ValueError(f"gold_plan of row {i}: {exc}") from None
        plan = parse_plan(last_message_text(completion), max_steps)
        if plan.error is None:
            pairs.append((plan.questions, gold_texts))
            slots.append(i)
    for i, match in zip(slots, scorer.score_many(pairs)):
        rewards[i] = match.f1
    return rewards


def plan_reward(ctx: RewardContext) -> RewardFunc:
    """SEPR as a TRL reward function, its embeddings cached in the warehouse."""
    from functools import partial, update_wrapper

    from ragfactory.tasks.rewards.sepr import load_plan_scorer

    reward = partial(sepr_reward, scorer=load_plan_scorer(cache_dir=ctx.warehouse.artifacts_dir("embeddings")))
    return update_wrapper(reward, sepr_reward)


REWARDS = {"sepr": plan_reward}
