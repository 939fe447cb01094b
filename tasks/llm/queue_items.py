"""What the scheduler's queue holds, and the token estimate that bounds admission.

A question's ``generate`` call is an ``Ask`` for some ``Slot`` s (one sample of one request each,
the unit the call cache stores); what the cache misses is queued as ``Entry`` s, each one engine
request, admitted while the estimated tokens fit (``estimate_tokens``). The policy that moves
them is ``tasks/llm/scheduler.py``; the shapes follow vLLM's v1 engine core (a request, its
samples, its token budget).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ragfactory.tasks.llm.types import Request


@dataclass(frozen=True)
class Slot:
    """One sample of one request: the unit the call cache stores."""

    cid: str
    request: Request
    sample_index: int


@dataclass(eq=False)
class Ask:
    """One ``generate`` call: the samples it needs and the future its question awaits."""

    client: Any  # the Batcher that asked; its cache, stats and limits
    request: Request
    slots: list[Slot]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    hits: frozenset[str] = frozenset()  # call ids the cache knew at lookup
    entries: list[Entry] = field(default_factory=list)  # engine entries it waits on


@dataclass(eq=False)
class Entry:
    """One engine request in the queue: a whole request, or one missing sample of one."""

    request: Request
    slots: list[Slot]
    tokens: int  # estimated n * (prompt tokens + max_tokens): what it may hold in the engine
    owner: Any  # the shard that asked first: its stats count the engine work
    loop: asyncio.AbstractEventLoop
    asks: list[Ask] = field(default_factory=list)


@dataclass
class SchedulerStats:
    """What one engine's scheduler did: for tests, logs and the batching benchmark."""

    engine_calls: int = 0
    batch_sizes: list[int] = field(default_factory=list)  # requests per engine call
    batch_tokens: list[int] = field(default_factory=list)  # estimated tokens per engine call
    merged: int = 0  # engine calls that carried the requests of more than one shard
    split: int = 0  # merged calls that failed and were run again shard by shard
    peak_tokens: int = 0  # most estimated tokens admitted at once
    prompt_tokens: int = 0  # prompt tokens of the rows the engine generated
    prefilled_tokens: int = 0  # of them, those prefill put through the model (engines that count it)


def estimate_tokens(backend: object, request: Request) -> int:
    """What a request may hold in the engine: ``n`` rows of prompt + ``max_tokens``."""
    count = getattr(backend, "count_tokens", None)
    if callable(count):
        prompt = int(count(request))
    else:  # ~3 characters per token over-counts English for small tokenizers: a safe side
        prompt = -(-sum(len(m.content) for m in request.messages) // 3)
    return request.sampling.n * (prompt + request.sampling.max_tokens)
