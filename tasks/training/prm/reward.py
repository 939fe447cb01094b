"""A trained PRM as GRPO's ``prm`` reward (the signature of ``tasks/rewards/__init__.py``).

A completion is split into the export's steps: a step ends at ``</information>`` (a search step
with its observation, as ``step_labels`` joins them: text ``\\n\\n<information>…</information>``),
at ``</answer>``, or at ``</search>`` with no ``<information>`` after it; each piece is stripped
of the blank lines around it (the ``\\n\\n`` Search-R1 puts after an observation) and empty
pieces are dropped. A message-list completion is its contents joined with ``\\n\\n`` first. Text
with no boundary is one step. The steps' P(good) aggregate (``min`` by default) is the reward.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ragfactory.tasks.training.prm.scoring import StepScorer

STEP_END = re.compile(r"</information>|</answer>|</search>(?!\s*<information>)")
AGGREGATES = {
    "min": min,  # a path is as good as its worst step (PRM best-of-N)
    "last": lambda scores: scores[-1],
    "mean": lambda scores: sum(scores) / len(scores),
}


def message_text(value) -> str:
    """A prompt or completion as text: a string, or a message list's contents joined by blank lines."""
    if isinstance(value, str):
        return value
    return "\n\n".join(str(m.get("content") or "") for m in value)


def split_steps(text: str) -> list[str]:
    """The steps of a completion, cut where the export's steps end (module docstring)."""
    steps, start = [], 0
    for match in STEP_END.finditer(text):
        steps.append(text[start : match.end()].strip())
        start = match.end()
    steps.append(text[start:].strip())
    return [s for s in steps if s] or [text.strip()]


class PRMReward:
    """A TRL reward function ``(prompts, completions, **columns) -> list[float]`` from a PRM."""

    def __init__(self, scorer: StepScorer, aggregate: str = "min"):
        if aggregate not in AGGREGATES:
            raise ValueError(f"prm reward: unknown aggregate {aggregate!r}; expected one of {sorted(AGGREGATES)}")
        self.scorer, self.aggregate = scorer, aggregate
        self.__name__ = f"prm_{aggregate}"  # TRL logs a reward under its function's name

    def step_rewards(self, prompts: Sequence, completions: Sequence) -> list[list[float]]:
        """P(good) of every step of every completion."""
        items = [(message_text(p), split_steps(message_text(c))) for p, c in zip(prompts, completions, strict=True)]
        return self.scorer.score_many(items)

    def __call__(self, prompts: Sequence, completions: Sequence, **columns) -> list[float]:
        return [AGGREGATES[self.aggregate](scores) for scores in self.step_rewards(prompts, completions)]


def prm_reward(scorer: StepScorer, aggregate: str = "min") -> PRMReward:
    """The PRM as a reward: one score per completion, its steps' P(good) aggregated."""
    return PRMReward(scorer, aggregate)


def registered_prm_reward(wh, options: Mapping[str, Any]) -> PRMReward:
    """GRPO's ``prm`` reward: the PRM ``options["prm_model"]`` names (a ``models`` id, a folder or
    ``latest:NAME``; default ``latest:prm``, the newest ``prm`` run), its step scores aggregated by
    ``options["prm_aggregate"]`` (default ``min``)."""
    from ragfactory.tasks.training.registry import resolve_model_ref

    ref = resolve_model_ref(wh, str(options.get("prm_model", "latest:prm")))
    return prm_reward(StepScorer.load(ref.load), str(options.get("prm_aggregate", "min")))


def step_rewards(scorer: StepScorer, prompts: Sequence, completions: Sequence) -> list[list[float]]:
    """The per-step scores ``prm_reward`` aggregates."""
    return PRMReward(scorer).step_rewards(prompts, completions)
