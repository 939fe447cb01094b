"""The batcher: sequential ``async`` strategy code per question, large batches for the engine.

docs/architecture.md, "Core contracts": Generator and Backend. Strategies ``await batcher.generate(request)`` as if they were
alone. ``Batcher.run_all`` runs a shard's questions with at most ``max_in_flight`` at a time,
each in its own task tagged (through a context variable) with a question token; a question is
*waiting* while it has a request pending here. The batcher is one shard's side of the engine's
``Scheduler`` (``tasks/llm/scheduler.py``, where the whole policy and its diagram live): it holds
its requests until every in-flight question waits (or ``max_batch_size`` are pending), lets the
event loop run ``settle_rounds`` idle turns so ``asyncio.gather`` siblings join, and submits them;
requests for a continuous engine are submitted once the settle rounds pass.

Structured generation is decided per role: a request's grammar goes to the engine (and into
its call ids) only when its role is ``structured``; otherwise the batcher drops it, and the
request is the free one it would have been without a grammar, cache rows included.

What "waiting" cannot see: a question that fans out a model call and, beside it, a non-model
await (a retrieval in a thread) counts as waiting once the model call is pending, so the
submission may go without the request that follows the retrieval. Batches get smaller, results
do not change.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ragfactory.tasks.llm.cache import CallCache
from ragfactory.tasks.llm.config import MAX_BATCH_TOKENS
from ragfactory.tasks.llm.queue_items import Ask, Slot
from ragfactory.tasks.llm.scheduler import Scheduler
from ragfactory.tasks.llm.types import Backend, Completion, Request, call_id

T = TypeVar("T")
ANY_ROLE = "*"
# The question a task works for; child tasks (gather, create_task) inherit it with the context.
_QUESTION: ContextVar[object | None] = ContextVar("ragfactory_batcher_question", default=None)


@dataclass(frozen=True)
class BatcherConfig:
    """When a shard's requests go to the scheduler, and how much one engine call may take."""

    max_batch_size: int = 64  # requests per engine call; bounds engine memory and tail latency
    max_batch_tokens: int = MAX_BATCH_TOKENS  # estimated prompt + max_tokens per engine call
    settle_rounds: int = 2  # idle loop turns before a flush, so gather() siblings join one batch

    def __post_init__(self):
        for name in ("max_batch_size", "max_batch_tokens", "settle_rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class BatchStats:
    """What one shard's requests did: for tests, logs and the batching benchmark."""

    requests: int = 0  # generate() calls received
    flushes: int = 0  # submissions to the scheduler
    engine_calls: int = 0  # engine calls that carried this shard's requests
    batch_sizes: list[int] = field(default_factory=list)  # this shard's requests per engine call
    rows: int = 0  # sequences the engine produced for this shard (requests x n)
    hits: int = 0  # samples answered from the cache
    misses: int = 0  # samples the engine generated
    prompt_tokens: int = 0  # prompt tokens of those samples
    prefilled_tokens: int = 0  # this shard's share of what prefill computed (engines that count it)

    @property
    def mean_batch_size(self) -> float:
        return sum(self.batch_sizes) / len(self.batch_sizes) if self.batch_sizes else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "flushes": self.flushes,
            "engine_calls": self.engine_calls,
            "mean_batch_size": self.mean_batch_size,
            "max_batch_size": max(self.batch_sizes, default=0),
            "rows": self.rows,
            "hits": self.hits,
            "misses": self.misses,
            "prompt_tokens": self.prompt_tokens,
            "prefilled_tokens": self.prefilled_tokens,
        }


class Batcher:
    """A ``Generator`` that hands the requests of in-flight questions to engine schedulers.

    ``backends`` is one backend for every role, or a mapping role -> backend (``policy``,
    ``judge``); roles mapped to the same backend object share its scheduler and engine calls.
    A ``Scheduler`` given as a backend (the process's engine pool, ``tasks/llm/engine.py``) is
    shared with every other shard that uses it; a plain backend gets a scheduler of its own.
    """

    def __init__(
        self,
        backends: Backend | Scheduler | Mapping[str, Backend | Scheduler],
        cache: CallCache | None = None,
        config: BatcherConfig = BatcherConfig(),
        free_roles: frozenset[str] = frozenset(),
    ):
        self.backends = dict(backends) if isinstance(backends, Mapping) else {ANY_ROLE: backends}
        self.free_roles = free_roles  # roles whose requests are generated without their grammar
        self.cache = cache if cache is not None else CallCache("unrecorded")
        self.config = config
        self.stats = BatchStats()
        self.settled = True  # every question waits and nothing is held back: read by schedulers
        self._schedulers: dict[int, Scheduler] = {}
        for backend in self.backends.values():
            key = id(backend)
            if key not in self._schedulers:
                own = backend if isinstance(backend, Scheduler) else Scheduler(backend)
                self._schedulers[key] = own
                own.attach(self)
        self._pending: list[Ask] = []
        self._active: set[object] = set()
        self._waiting: Counter[object] = Counter()
        self._delegating: Counter[object] = Counter()  # questions waiting on nested run_all
        self._counted: dict[int, object] = {}  # id(ask) -> its question, while it waits
        self._submitted = 0
        self._drainer: asyncio.Task | None = None

    def backend_for(self, role: str) -> Backend | Scheduler:
        if role in self.backends:
            return self.backends[role]
        if ANY_ROLE in self.backends:
            return self.backends[ANY_ROLE]
        raise KeyError(f"no backend for role {role!r}; configured roles: {sorted(self.backends)}")

    def scheduler_for(self, role: str) -> Scheduler:
        return self._schedulers[id(self.backend_for(role))]

    async def generate(self, request: Request) -> list[Completion]:
        """The request's ``n`` completions, once the engine call it joins comes back."""
        scheduler = self.scheduler_for(request.role)  # fail in the caller, not in a step
        if request.role in self.free_roles:
            request = replace(request, sampling=request.sampling.free())
        slots = [Slot(call_id(scheduler.fingerprint, request, i), request, i) for i in range(request.sampling.n)]
        loop = asyncio.get_running_loop()
        ask = Ask(self, request, slots, loop.create_future(), loop)
        question = _QUESTION.get()
        if question in self._active:
            self._counted[id(ask)] = question
            self._waiting[question] += 1
        self._pending.append(ask)
        self._submitted += 1
        self.stats.requests += 1
        self._refresh()
        self._kick()
        try:
            return await ask.future
        finally:
            if ask in self._pending:  # cancelled before its submission
                self._pending.remove(ask)
            elif not ask.future.done() or ask.future.cancelled():
                scheduler.cancel(ask)
            self.settle(ask)

    def settle(self, ask: Ask) -> None:
        """``ask`` is answered or gone: its question no longer waits on it."""
        question = self._counted.pop(id(ask), None)
        if question is None:
            return
        self._waiting[question] -= 1
        if self._waiting[question] <= 0:
            del self._waiting[question]
        self._refresh()

    async def run_all(
        self,
        questions: Iterable[Callable[[], Awaitable[T]] | Awaitable[T]],
        max_in_flight: int,
    ) -> list[T]:
        """Run question coroutines, ``max_in_flight`` at a time; results in input order.

        The first question to raise cancels the others and its exception is raised.
        """
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        jobs = list(questions)
        results: list[Any] = [None] * len(jobs)
        queue = iter(enumerate(jobs))

        async def worker():
            for index, job in queue:  # one shared iterator: each question runs once
                results[index] = await self._run_question(job)

        # Called from inside a question, that question now waits on its sub-questions.
        parent = _QUESTION.get()
        self._delegating[parent] += 1
        self._refresh()
        workers = [asyncio.ensure_future(worker()) for _ in range(min(max_in_flight, len(jobs)))]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            for job in queue:  # never started: close coroutines so none warns "never awaited"
                if inspect.iscoroutine(job[1]):
                    job[1].close()
            raise
        finally:
            self._delegating[parent] -= 1
            if self._delegating[parent] <= 0:
                del self._delegating[parent]
            self._refresh()
        return results

    async def _run_question(self, job: Callable[[], Awaitable[T]] | Awaitable[T]) -> T:
        token = object()
        self._active.add(token)
        self._refresh()
        reset = _QUESTION.set(token)
        try:
            return await (job() if callable(job) else job)
        finally:
            _QUESTION.reset(reset)
            self._active.discard(token)
            self._waiting.pop(token, None)
            self._refresh()
            if self._pending:  # one question fewer may mean everyone left is waiting
                self._kick()

    def _refresh(self) -> None:
        """Recompute ``settled``; tell the schedulers when this shard has nothing more to add."""
        settled = self._all_waiting() and not self._pending
        if settled and not self.settled:
            for scheduler in self._schedulers.values():
                scheduler.poke()
        self.settled = settled

    def _kick(self) -> None:
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())

    def _all_waiting(self) -> bool:
        waiting = sum(1 for t in self._active if self._waiting[t] > 0 or self._delegating[t] > 0)
        return waiting >= len(self._active)

    def _ready(self) -> bool:
        return len(self._pending) >= self.config.max_batch_size or self._all_waiting()

    async def _drain(self) -> None:
        while self._pending:
            await self._settle()
            ready = self._ready()
            going = [a for a in self._pending if ready or self.scheduler_for(a.request.role).continuous]
            if not going:
                return
            self._pending = [a for a in self._pending if a not in going]
            self._submit(going)
            self._refresh()  # after the submission: a scheduler that sees this shard settled has it all

    def _submit(self, asks: list[Ask]) -> None:
        self.stats.flushes += 1
        by_engine: dict[int, tuple[Scheduler, list[Ask]]] = {}
        for ask in asks:
            scheduler = self.scheduler_for(ask.request.role)
            by_engine.setdefault(id(scheduler), (scheduler, []))[1].append(ask)
        for scheduler, group in by_engine.values():
            try:
                scheduler.submit(group)
            except Exception as exc:  # a cache read error or a bug: no question may hang on it
                for ask in group:
                    if not ask.future.done():
                        self.settle(ask)
                        ask.future.set_exception(exc)

    async def _settle(self) -> None:
        quiet = 0
        while quiet < self.config.settle_rounds:
            before = self._submitted
            await asyncio.sleep(0)
            quiet = quiet + 1 if self._submitted == before else 0
