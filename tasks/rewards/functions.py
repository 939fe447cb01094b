"""The stock GRPO reward functions, in the signature of ``tasks/rewards/__init__.py``.

Answer rewards follow the outcome reward of TreePS-RAG / Search-R1: the text inside the last
``<answer>…</answer>`` of the completion scored by exact match or token F1 against the row's
``golden_answers``; no answer tag scores 0. The format reward checks that a completion ends in one
answer tag. Rewards that need a service (a plan scorer, a judge, a trained step reward model) are
built per run and plug in through ``reward_functions``' ``extra`` by name.

>>> answer_em_reward([[]], [[{"role": "assistant", "content": "<answer>Paris</answer>"}]],
...                  golden_answers=[["paris"]])
[1.0]
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ragfactory.tasks.rewards import RewardFunc
from ragfactory.tasks.rewards.answer import exact_match, f1_score

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


REWARDS: dict[str, RewardFunc] = {
    "answer_em": answer_em_reward,
    "answer_f1": answer_f1_reward,
    "format": format_reward,
}


def reward_functions(names: list[str], extra: Mapping[str, RewardFunc] | None = None) -> list[RewardFunc]:
    """The reward functions named, from the built-ins plus ``extra`` (those built per run, e.g.
    ``{"sepr": ...}``)."""
    known = {**REWARDS, **(extra or {})}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown reward function(s) {unknown}; known: {sorted(known)}")
    if not names:
        raise ValueError("GRPO needs at least one reward function")
    return [known[n] for n in names]
