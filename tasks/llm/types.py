"""The generation contract every backend and strategy shares (docs/architecture.md, "Core contracts").

A ``Request`` is chat messages plus sampling parameters; a backend answers it with ``n``
``Completion`` objects. Strategies never call a backend directly: they ``await`` a ``Generator``
(normally the batcher), which is what lets one engine call serve every in-flight question.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Grammar:
    """An output grammar in llguidance's Lark dialect, rendered for one ``max_tokens``.

    ``name`` is the prompt it belongs to; ``max_tokens`` the most tokens an output it accepts
    can take (``grammar.token_bound``), end of sequence included.
    """

    name: str
    text: str = field(repr=False)
    max_tokens: int = 0

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    def key(self) -> dict:
        return {"name": self.name, "sha256": self.digest}


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters; ``seed`` is the request's base seed (sample i uses seed + i).

    ``grammar`` constrains every sample to it (structured generation); None samples freely.
    """

    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int = 0
    grammar: Grammar | None = None

    def key(self) -> dict:
        """The fields that change the output, for content addressing (seed is keyed apart).

        A free request has no ``grammar`` key, so its call ids are those of releases that
        had no structured generation; a constrained one keys its grammar by name and content.
        """
        # asdict's order less n, seed and grammar; asdict itself walked the grammar's text too
        data = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        data["stop"] = list(self.stop)
        if self.grammar is not None:
            data["grammar"] = self.grammar.key()
        return data

    def free(self) -> Sampling:
        """The same sampling without its grammar."""
        return replace(self, grammar=None) if self.grammar is not None else self


@dataclass(frozen=True)
class Request:
    messages: tuple[Message, ...]
    sampling: Sampling = Sampling()
    role: str = "policy"
    tags: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @classmethod
    def chat(cls, messages: list[dict] | list[Message], role: str = "policy", **sampling) -> Request:
        msgs = tuple(m if isinstance(m, Message) else Message(m["role"], m["content"]) for m in messages)
        return cls(messages=msgs, sampling=Sampling(**sampling), role=role)

    def messages_json(self) -> list[dict]:
        return [{"role": m.role, "content": m.content} for m in self.messages]


@dataclass(frozen=True)
class Completion:
    """One sample. The token fields are what the engine saw and sampled (docs/tokens.md), kept so
    a trainer never re-tokenises: ``prompt_token_ids`` the rendered prompt, ``completion_token_ids``
    every sampled token (end of sequence and a stop string's tail included), ``completion_logprobs``
    each sampled token's log-probability as the engine reports it, and ``tokenizer_fingerprint``
    the tokenizer and chat template that made the prompt ids. None where the engine gives none."""

    text: str
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    call_id: str = ""
    cached: bool = False
    prompt_token_ids: tuple[int, ...] | None = field(default=None, repr=False)
    completion_token_ids: tuple[int, ...] | None = field(default=None, repr=False)
    completion_logprobs: tuple[float, ...] | None = field(default=None, repr=False)
    tokenizer_fingerprint: str | None = None


def call_id(fingerprint: str, request: Request, sample_index: int) -> str:
    """Content address of one completion: model, messages, sampling, seed and sample index."""
    payload = json.dumps(
        {
            "model": fingerprint,
            "messages": request.messages_json(),
            "sampling": request.sampling.key(),
            "seed": request.sampling.seed,
            "sample": sample_index,
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


@runtime_checkable
class Generator(Protocol):
    """Anything that turns requests into completions, one list of ``n`` per request."""

    async def generate(self, request: Request) -> list[Completion]: ...


@runtime_checkable
class Backend(Protocol):
    """An engine: answers a whole batch of requests in one call.

    ``fingerprint`` identifies the model weights and engine settings that change outputs; it is
    part of every call id, so a different model never hits another model's cache.
    """

    fingerprint: str

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]: ...


class ContinuousBackend(Backend, Protocol):
    """An engine that schedules its sequences itself (continuous batching: an OpenAI-compatible
    server such as ``vllm serve``, vLLM's async engine): at every decode step it batches whatever
    is in flight, so a request is best handed over the moment a question issues it rather than
    held back to form a batch. ``continuous`` says it wants that; the scheduler then awaits
    ``agenerate_batch`` on the asking shard's event loop, many calls at once
    (``tasks/llm/scheduler.py``)."""

    continuous: bool

    async def agenerate_batch(self, requests: list[Request]) -> list[list[Completion]]: ...


def is_continuous(backend: object) -> bool:
    """Whether ``backend`` takes requests as they come (``ContinuousBackend``)."""
    return bool(getattr(backend, "continuous", False)) and hasattr(backend, "agenerate_batch")


@dataclass(frozen=True)
class RetryPolicy:
    """How a backend retries a failed engine call before raising it to the shard task."""

    attempts: int = 3  # a transient fault (dropped connection, busy server) rarely lasts 3 tries
    backoff_s: float = 1.0  # first wait; doubles each retry so a restarting server gets time
    max_backoff_s: float = 30.0  # a longer wait is better spent by Prefect retrying the shard
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        return min(self.backoff_s * 2**retry, self.max_backoff_s)

    def call(self, fn: Callable[..., T], *args, sleep: Callable[[float], None] = time.sleep) -> T:
        """``fn(*args)``, retried on ``retry_on``; the last failure is raised unchanged."""
        for retry in range(self.attempts):
            try:
                return fn(*args)
            except self.retry_on:
                if retry == self.attempts - 1:
                    raise
                sleep(self.delay(retry))
        raise AssertionError("unreachable")

    async def acall(self, fn: Callable[..., Awaitable[T]], *args) -> T:
        """``await fn(*args)``, retried as ``call`` does, waiting without blocking the loop."""
        for retry in range(self.attempts):
            try:
                return await fn(*args)
            except self.retry_on:
                if retry == self.attempts - 1:
                    raise
                await asyncio.sleep(self.delay(retry))
        raise AssertionError("unreachable")


def generate_checked(backend: Backend, requests: list[Request]) -> list[list[Completion]]:
    """``backend.generate_batch``, with a ``StopIteration`` (an iterator run dry inside an
    engine) turned into a ``RuntimeError``: asyncio cannot set it on the awaiting future,
    which would then never finish, and the run would hang instead of failing its shard."""
    try:
        return backend.generate_batch(requests)
    except StopIteration as exc:
        raise RuntimeError(f"{type(backend).__name__}.generate_batch raised StopIteration") from exc


def check_answers(backend: Backend, requests: list[Request], answers: Any) -> None:
    """A backend answered one list of ``n`` completions per request, or a clear error."""
    name = type(backend).__name__
    if not isinstance(answers, list) or len(answers) != len(requests):
        got = len(answers) if isinstance(answers, list) else type(answers).__name__
        raise ValueError(f"{name}.generate_batch returned {got} answers for {len(requests)} requests")
    for index, (request, completions) in enumerate(zip(requests, answers)):
        if len(completions) != request.sampling.n:
            raise ValueError(
                f"{name}.generate_batch returned {len(completions)} completions for request "
                f"{index} with n={request.sampling.n}"
            )
