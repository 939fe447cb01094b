"""TreePS-RAG steps as text: the prompt, one step's parsing, observations and trajectories.

A step is one (r_i, a_i, o_i) of TreePS-RAG, §2.1: reasoning, then an action, ``<search> query
</search>`` or ``<answer> … </answer>``, and for a search the top-K passages as the observation.
The prompt is Search-R1's (Jin et al. 2025, ``make_prefix`` of its ``nq_search.py``), with
``<think>`` replaced by ``<reason>`` as TreePS-RAG, Appendix A does for Qwen3; ``treeps_search_r1``
keeps the original ``<think>`` for models trained on it. Passages render as Search-R1's
retrieval answer does (``Doc i(Title: …) text`` per line inside ``<information>``).

A state is a chat: the prompt as the user turn, each step an assistant turn, each observation
a user turn holding the ``<information>`` block, so every backend can continue it. A trajectory
also has Search-R1's single-sequence layout, the response the RL trainer sees: step texts with
``\\n\\n<information>…</information>\\n\\n`` between them; ``render_response`` gives that text
with the character spans of the steps (model tokens, trained with the step's advantage) and of
the observations (retrieved text, masked from the loss, §2.3 "Policy Optimization").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragfactory.tasks.llm.types import Message
from ragfactory.tasks.prompts.loader import render_prompt
from ragfactory.tasks.search.parsing import ROLLOUT_STOP, Parsed, information, parse_rollout_turn, tag_span

# prompt name -> the tag its reasoning goes in
PROMPT_REASONING_TAGS = {"treeps_step": "reason", "treeps_search_r1": "think"}
# A step ends at its action; engines drop the stop string, ``closed_step`` puts it back.
STEP_STOP = ROLLOUT_STOP
_CLOSING = {"search": "</search>", "answer": "</answer>"}


def check_prompt(name: str) -> str:
    if name not in PROMPT_REASONING_TAGS:
        raise ValueError(f"unknown TreePS prompt {name!r}; known: {sorted(PROMPT_REASONING_TAGS)}")
    return name


def initial_prompt(question: str, prompt: str) -> str:
    """The input x of the root: the question in the step prompt ``prompt``."""
    return render_prompt(check_prompt(prompt), question=question)


def parse_step(text: str | None, prompt: str) -> Parsed:
    """``action`` ("search" with ``query``, "answer" with ``answer``, None when malformed) and
    ``reasoning`` (the prompt's reasoning tag, else the text before the action)."""
    parsed = parse_rollout_turn(text)
    tagged = tag_span(text or "", PROMPT_REASONING_TAGS[check_prompt(prompt)])
    reasoning = tagged[1] if tagged is not None else parsed.get("reasoning")
    return Parsed({**parsed.fields, "reasoning": reasoning or None}, parsed.error)


def closed_step(text: str, action: str | None) -> str:
    """The step with the closing tag its stop string removed, so the transcript parses."""
    tail = _CLOSING.get(action or "")
    body = text.rstrip()
    return body if tail is None or body.endswith(tail) else f"{body} {tail}"


def step_turns(text: str, hits: Sequence[Mapping] | None) -> list[Message]:
    """A step as chat turns: the model's text, then its observation when it searched."""
    turns = [Message("assistant", text)]
    if hits is not None:
        turns.append(Message("user", information(hits)))
    return turns


@dataclass(frozen=True)
class Span:
    """Characters [start, end) of a response."""

    start: int
    end: int


def render_response(turns: Sequence[Message]) -> tuple[str, list[Span], list[Span]]:
    """The turns after the prompt as one response, with the spans of steps and observations.

    >>> text, steps, obs = render_response(step_turns("<search> x </search>", []) +
    ...                                    step_turns("<answer> y </answer>", None))
    >>> text[obs[0].start:obs[0].end]
    '\\n\\n<information></information>\\n\\n'
    >>> [text[s.start:s.end] for s in steps]
    ['<search> x </search>', '<answer> y </answer>']
    """
    parts: list[str] = []
    steps: list[Span] = []
    observations: list[Span] = []
    offset = 0
    for turn in turns:
        if turn.role == "assistant":
            piece, spans = turn.content, steps
        elif turn.role == "user":
            piece, spans = f"\n\n{turn.content}\n\n", observations
        else:
            raise ValueError(f"a trajectory turn must be assistant or user, got {turn.role!r}")
        spans.append(Span(offset, offset + len(piece)))
        parts.append(piece)
        offset += len(piece)
    return "".join(parts), steps, observations
