"""Rollouts that value a DecEx-RAG branch: Monte-Carlo completions of its state (§2.1–2.2).

From a branch's state the policy continues with the rollout prompt (Table 8), calling the search
engine with ``<search> query </search>``; each search is answered with the top documents in an
``<information>`` block as the next user turn, until the model writes ``<answer>`` or the turn
limit ends the rollout without one. The ``n`` rollouts of a branch run in lockstep: their first
turn is one request with ``n`` samples (sample i seeded ``seed + i``), and at every later turn
the searches of all rollouts still running go to the retriever as one batch and their next
turns are issued together, so the batcher sees them side by side.

A turn with neither tag ends its rollout with a format error and no answer (score 0); it never
stops the other rollouts or the question.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ragfactory.tasks.llm.types import Completion, Generator, Grammar, Message, Request, Sampling
from ragfactory.tasks.retrieval.types import Hit, Retriever
from ragfactory.tasks.search.common import sample_n, search_batch
from ragfactory.tasks.search.decex.history import render_information
from ragfactory.tasks.search.parsing import ROLLOUT_STOP, parse_rollout_turn


@dataclass(frozen=True)
class RolloutSpec:
    """How one branch's rollouts sample: count, turn limit, retrieval depth and sampling."""

    n: int
    max_turns: int
    top_k: int
    temperature: float
    max_tokens: int
    role: str
    grammar: Grammar | None = None  # one turn's output grammar (Table 8)


@dataclass
class RolloutResult:
    """One finished rollout: its transcript, final answer (None when it gave none) and lineage."""

    index: int
    seed: int
    turns: list[str] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)
    passage_ids: list[str] = field(default_factory=list)
    final_answer: str | None = None
    error: str | None = None  # the format error that ended it
    truncated: bool = False  # still searching when the turn limit came
    messages: list[Message] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.turns)

    @property
    def n_turns(self) -> int:
        return len(self.call_ids)


def _closed_turn(text: str, action: str | None) -> str:
    """The turn with the closing tag an engine's stop string removed, so the transcript parses."""
    tail = {"search": "</search>", "answer": "</answer>"}.get(action or "")
    body = text.rstrip()
    return body if tail is None or body.endswith(tail) else f"{body} {tail}"


async def run_rollouts(
    prompt: str,
    spec: RolloutSpec,
    generator: Generator,
    retriever: Retriever,
    seed_of: Callable[[str], int],
    tags: tuple[tuple[str, str], ...] = (),
) -> list[RolloutResult]:
    """``spec.n`` rollouts of the state in ``prompt``; ``seed_of(suffix)`` names every request."""
    base = seed_of("r")
    first = _request([Message("user", prompt)], spec, spec.n, base, tags)
    results = [RolloutResult(index=i, seed=base + i, messages=[Message("user", prompt)]) for i in range(spec.n)]
    pending = list(zip(results, await sample_n(generator, first)))
    for turn in range(1, spec.max_turns + 1):
        searching = [(r, query) for r, c in pending if (query := _record_turn(r, c)) is not None]
        if turn == spec.max_turns:
            for result, _ in searching:
                result.truncated = True
            break
        if not searching:
            break
        hits = await search_batch(retriever, [q for _, q in searching], spec.top_k)
        requests = [_next_request(r, found, spec, seed_of, tags) for (r, _), found in zip(searching, hits)]
        answers = await asyncio.gather(*(sample_n(generator, req) for req in requests))
        pending = [(r, completions[0]) for (r, _), completions in zip(searching, answers)]
    return results


def _record_turn(result: RolloutResult, completion: Completion) -> str | None:
    """Add a turn to the transcript; the query when the turn searched, else None (finished)."""
    parsed = parse_rollout_turn(completion.text)
    action = parsed.get("action")
    turn = _closed_turn(completion.text, action)
    result.turns.append(turn)
    result.call_ids.append(completion.call_id)
    result.messages.append(Message("assistant", turn))
    if parsed.error:
        result.error = parsed.error
    elif action == "answer":
        result.final_answer = parsed.get("answer")
    return parsed.get("query") if action == "search" else None


def _next_request(
    result: RolloutResult,
    hits: Sequence[Hit],
    spec: RolloutSpec,
    seed_of: Callable[[str], int],
    tags: tuple[tuple[str, str], ...],
) -> Request:
    information = render_information(hits)
    result.turns.append(information)
    result.passage_ids.extend(hit.passage_id for hit in hits)
    result.messages.append(Message("user", information))
    return _request(result.messages, spec, 1, seed_of(f"r{result.index}/{result.n_turns}"), tags)


def _sampling(spec: RolloutSpec, n: int, seed: int) -> Sampling:
    return Sampling(
        n=n,
        temperature=spec.temperature,
        max_tokens=spec.max_tokens,
        stop=ROLLOUT_STOP,
        seed=seed,
        grammar=spec.grammar,
    )


def _request(
    messages: Sequence[Message], spec: RolloutSpec, n: int, seed: int, tags: tuple[tuple[str, str], ...]
) -> Request:
    return Request(tuple(messages), _sampling(spec, n, seed), spec.role, tags)
