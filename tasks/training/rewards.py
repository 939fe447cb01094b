"""GRPO reward functions in TRL's signature ``(prompts, completions, **columns) -> list[float]``.

Answer rewards follow the outcome reward of TreePS-RAG / Search-R1: the text inside the last
``<answer>…</answer>`` of the completion scored by exact match or token F1 against the row's
``golden_answers``; no answer tag scores 0. The format reward checks that a completion ends in one
answer tag. The plan reward (SEPR, APEX-Searcher §2.2.1, ``tasks/rewards/sepr.py``) scores
the plan the planner's parser reads from the completion against the row's ``gold_plan`` (JSON
text, as ``grpo_prompts.gold_plan`` stores it); it needs a plan scorer, so it plugs in through
``extra`` by name.

>>> answer_em_reward([[]], [[{"role": "assistant", "content": "<answer>Paris</answer>"}]],
...                  golden_answers=[["paris"]])
[1.0]
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

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ragfactory.tasks.rewards.answer import exact_match, f1_score
from ragfactory.tasks.search.apex.plan_format import MAX_STEPS, parse_plan, plan_texts

if TYPE_CHECKING:  # SEPR loads scipy and an encoder: only a plan reward needs it
    from ragfactory.tasks.rewards.sepr import PlanScorer

RewardFunc = Callable[..., list[float]]
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
WELL_FORMED = re.compile(r"^(?!.*<answer>.*<answer>).*<answer>.+?</answer>\s*$", re.DOTALL)


def completion_text(completion) -> str:
    """The text of a completion, conversational (a message list) or standard (a string)."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion)


def parse_answer(text: str) -> str | None:
    """The last ``<answer>`` span, stripped; None when the completion has none."""
    found = ANSWER.findall(text)
    return found[-1].strip() if found else None


def _answer_reward(metric, completions, golden_answers) -> list[float]:
    if golden_answers is None:
        raise ValueError("answer rewards need the export's golden_answers column")
    scores = []
    for completion, gold in zip(completions, golden_answers):
        answer = parse_answer(completion_text(completion))
        scores.append(0.0 if answer is None or not gold else float(metric(answer, list(gold))))
    return scores


def answer_em_reward(prompts, completions, golden_answers=None, **columns) -> list[float]:
    """1 when the parsed answer exactly matches a golden answer (normalised), else 0."""
    return _answer_reward(exact_match, completions, golden_answers)


def answer_f1_reward(prompts, completions, golden_answers=None, **columns) -> list[float]:
    """Best token F1 of the parsed answer against the golden answers."""
    return _answer_reward(f1_score, completions, golden_answers)


def format_reward(prompts, completions, **columns) -> list[float]:
    """1 when the completion ends in exactly one non-empty ``<answer>`` span, else 0."""
    return [1.0 if WELL_FORMED.match(completion_text(c)) else 0.0 for c in completions]


def last_message_text(completion: Any) -> str:
    """A TRL completion as text: a string, or the last message of a conversational one (the plan)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], Mapping):
        return str(completion[-1].get("content") or "")
    if isinstance(completion, Mapping):
        return str(completion.get("content") or "")
    raise TypeError(f"a completion is text or a list of messages, got {type(completion).__name__}")


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


REWARDS: dict[str, RewardFunc] = {
    "answer_em": answer_em_reward,
    "answer_f1": answer_f1_reward,
    "format": format_reward,
}


def reward_functions(names: list[str], extra: Mapping[str, RewardFunc] | None = None) -> list[RewardFunc]:
    """The reward functions named, from the built-ins plus ``extra`` (e.g. ``{"sepr": ...}``)."""
    known = {**REWARDS, **(extra or {})}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown reward function(s) {unknown}; known: {sorted(known)}")
    if not names:
        raise ValueError("GRPO needs at least one reward function")
    return [known[n] for n in names]
