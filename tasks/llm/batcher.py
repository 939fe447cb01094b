"""The batcher: sequential ``async`` strategy code per question, large batches for the engine.

docs/architecture.md, "Core contracts": Generator and Backend. Strategies ``await
batcher.generate(request)`` as if they were alone. ``Batcher.run_all`` runs a shard's questions
with at most ``max_in_flight`` at a time, each in its own task tagged (through a context
variable) with a question token; a question is *waiting* while it has a request pending here.
The batcher flushes the pending requests as one engine call when every in-flight question is
waiting, or as soon as ``max_batch_size`` requests are pending. Before a flush it lets the event
loop run a few idle turns (``settle_rounds``), so that sibling requests a question fans out with
``asyncio.gather`` all join the same batch.

A flush first asks the ``CallCache`` for every (request, sample) call id: hits cost no engine
call, identical calls pending from several questions are generated once, and a request whose
samples are only partly cached asks the engine for the missing samples alone (sample ``i`` of a
request with seed ``s`` is, by contract, sample 0 of seed ``s + i``). The blocking backend call
runs off the event loop (``asyncio.to_thread``); a backend exception, already retried by the
backend, is raised in every question that waits on that engine call.

Structured generation is decided per role: a request's grammar goes to the engine (and into
its call ids) only when its role is ``structured``; otherwise the batcher drops it, and the
request is the free one it would have been without a grammar, cache rows included.

Continuous engines (``ContinuousBackend``: an OpenAI-compatible server, vLLM's async engine)
batch in-flight sequences at every decode step themselves, so holding a request back until every
question waits would only idle them: a request for such an engine is handed over once the
settle rounds pass (gather siblings still travel together), in a flush of its own that the
batcher does not wait for, and the engine sees each question's requests as soon as they exist.
Lock-step flushes stay for static-batch engines (transformers, vLLM's offline ``LLM``).

What "waiting" cannot see: a question that fans out a model call and, beside it, a non-model
await (a retrieval in a thread) counts as waiting once the model call is pending, so the flush
may go without the request that follows the retrieval. Batches get smaller, results do not change.
With both kinds of engine in one batcher, continuous requests issued while a lock-step flush
runs are handed over when it returns. Two equal requests streamed in separate flushes are
generated twice; the call cache keeps the first completion and both questions read it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ragfactory.tasks.llm.cache import CallCache, completion_from_row
from ragfactory.tasks.llm.types import Backend, Completion, Request, call_id, is_continuous

T = TypeVar("T")
ANY_ROLE = "*"
# The question a task works for; child tasks (gather, create_task) inherit it with the context.
_QUESTION: ContextVar[object | None] = ContextVar("ragfactory_batcher_question", default=None)


@dataclass(frozen=True)
class BatcherConfig:
    """When the batcher sends pending requests to the engine."""

    max_batch_size: int = 64  # requests per engine call; bounds engine memory and tail latency
    settle_rounds: int = 2  # idle loop turns before a flush, so gather() siblings join one batch

    def __post_init__(self):
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.settle_rounds < 1:
            raise ValueError(f"settle_rounds must be >= 1, got {self.settle_rounds}")


@dataclass
class BatchStats:
    """What the batcher did: for tests, logs and the batching benchmark."""

    requests: int = 0  # generate() calls received
    flushes: int = 0
    engine_calls: int = 0
    batch_sizes: list[int] = field(default_factory=list)  # requests per engine call
    rows: int = 0  # sequences the engine produced (requests x n)
    hits: int = 0  # samples answered from the cache
    misses: int = 0  # samples the engine generated

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
        }


@dataclass(eq=False)
class _Pending:
    request: Request
    question: object | None
    future: asyncio.Future
    counted: bool = False  # whether it counts towards its question's waiting requests


@dataclass(frozen=True)
class _Slot:
    """One sample of one request: the unit the cache stores."""

    cid: str
    request: Request
    sample_index: int


class Batcher:
    """A ``Generator`` that coalesces the requests of in-flight questions into engine batches.

    ``backends`` is one backend for every role, or a mapping role -> backend (``policy``,
    ``judge``); roles mapped to the same backend object share its engine calls.
    """

    def __init__(
        self,
        backends: Backend | Mapping[str, Backend],
        cache: CallCache | None = None,
        config: BatcherConfig = BatcherConfig(),
        free_roles: frozenset[str] = frozenset(),
    ):
        self.backends = dict(backends) if isinstance(backends, Mapping) else {ANY_ROLE: backends}
        self.free_roles = free_roles  # roles whose requests are generated without their grammar
        self.cache = cache if cache is not None else CallCache("unrecorded")
        self.config = config
        self.stats = BatchStats()
        self._pending: list[_Pending] = []
        self._active: set[object] = set()
        self._waiting: Counter[object] = Counter()
        self._delegating: Counter[object] = Counter()  # questions waiting on nested run_all
        self._submitted = 0
        self._drainer: asyncio.Task | None = None
        self._streaming: set[asyncio.Task] = set()  # flushes to continuous engines, in flight

    def backend_for(self, role: str) -> Backend:
        if role in self.backends:
            return self.backends[role]
        if ANY_ROLE in self.backends:
            return self.backends[ANY_ROLE]
        raise KeyError(f"no backend for role {role!r}; configured roles: {sorted(self.backends)}")

    async def generate(self, request: Request) -> list[Completion]:
        """The request's ``n`` completions, once the batch it joins comes back."""
        self.backend_for(request.role)  # fail in the caller, not inside a flush
        if request.role in self.free_roles:
            request = replace(request, sampling=request.sampling.free())
        item = _Pending(request, _QUESTION.get(), asyncio.get_running_loop().create_future())
        if item.question in self._active:
            item.counted = True
            self._waiting[item.question] += 1
        self._pending.append(item)
        self._submitted += 1
        self.stats.requests += 1
        self._kick()
        try:
            return await item.future
        finally:
            if item in self._pending:  # cancelled before its flush
                self._pending.remove(item)
            self._settle_item(item)

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
        return results

    async def _run_question(self, job: Callable[[], Awaitable[T]] | Awaitable[T]) -> T:
        token = object()
        self._active.add(token)
        reset = _QUESTION.set(token)
        try:
            return await (job() if callable(job) else job)
        finally:
            _QUESTION.reset(reset)
            self._active.discard(token)
            self._waiting.pop(token, None)
            if self._pending:  # one question fewer may mean everyone left is waiting
                self._kick()

    def _settle_item(self, item: _Pending) -> None:
        if item.counted:
            item.counted = False
            self._waiting[item.question] -= 1
            if self._waiting[item.question] <= 0:
                del self._waiting[item.question]

    def _kick(self) -> None:
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())

    def _ready(self) -> bool:
        if not self._pending:
            return False
        if len(self._pending) >= self.config.max_batch_size:
            return True
        waiting = sum(
            1 for token in self._active if self._waiting[token] > 0 or self._delegating[token] > 0
        )
        return waiting >= len(self._active)

    async def _drain(self) -> None:
        while True:
            await self._settle()
            self._stream()
            if not self._ready():
                return
            batch = self._pending[: self.config.max_batch_size]
            del self._pending[: len(batch)]
            await self._flush(batch)

    def _stream(self) -> None:
        """Hand every pending request of a continuous engine over now, without waiting for the
        flush to return."""
        streamed = [item for item in self._pending if is_continuous(self.backend_for(item.request.role))]
        if not streamed:
            return
        self._pending = [item for item in self._pending if item not in streamed]
        size = self.config.max_batch_size
        for start in range(0, len(streamed), size):
            task = asyncio.get_running_loop().create_task(self._flush(streamed[start : start + size]))
            self._streaming.add(task)
            task.add_done_callback(self._streaming.discard)

    async def _settle(self) -> None:
        quiet = 0
        while quiet < self.config.settle_rounds:
            before = self._submitted
            await asyncio.sleep(0)
            quiet = quiet + 1 if self._submitted == before else 0

    async def _flush(self, batch: list[_Pending]) -> None:
        self.stats.flushes += 1
        try:
            slots = {id(item): self._slots(item.request) for item in batch}
            rows = self.cache.fetch(s.cid for item in batch for s in slots[id(item)])
            self.stats.hits += sum(s.cid in rows for item in batch for s in slots[id(item)])
            failures = await self._generate_missing(batch, slots, rows)
        except Exception as exc:  # a bug or a cache read error: no question may hang on it
            for item in batch:
                self._fail(item, exc)
            return
        for item in batch:
            item_slots = slots[id(item)]
            error = next((failures[s.cid] for s in item_slots if s.cid in failures), None)
            if error is not None:
                self._fail(item, error)
                continue
            found = self.cache.fetch(s.cid for s in item_slots)
            completions = [
                completion_from_row(found[s.cid], cached=s.cid in rows) for s in item_slots
            ]
            self._settle_item(item)
            if not item.future.done():
                item.future.set_result(completions)

    def _fail(self, item: _Pending, error: BaseException) -> None:
        self._settle_item(item)
        if not item.future.done():
            item.future.set_exception(error)

    def _slots(self, request: Request) -> list[_Slot]:
        fingerprint = self.backend_for(request.role).fingerprint
        return [
            _Slot(call_id(fingerprint, request, i), request, i) for i in range(request.sampling.n)
        ]

    async def _generate_missing(
        self, batch: list[_Pending], slots: dict[int, list[_Slot]], rows: Mapping[str, dict]
    ) -> dict[str, BaseException]:
        """Send every uncached sample to its backend; returns the call ids that failed."""
        jobs: dict[int, list[tuple[Request, list[_Slot]]]] = {}
        backends: dict[int, Backend] = {}
        planned: set[str] = set()
        for item in batch:
            item_slots = slots[id(item)]
            missing = [s for s in item_slots if s.cid not in rows and s.cid not in planned]
            if not missing:
                continue
            planned.update(s.cid for s in missing)
            backend = self.backend_for(item.request.role)
            backends[id(backend)] = backend
            work = _engine_requests(item.request, item_slots, missing)
            jobs.setdefault(id(backend), []).extend(work)
        outcomes = await asyncio.gather(
            *(self._run_backend(backends[key], work) for key, work in jobs.items())
        )
        return {cid: exc for failed in outcomes for cid, exc in failed.items()}

    async def _run_backend(
        self, backend: Backend, work: list[tuple[Request, list[_Slot]]]
    ) -> dict[str, BaseException]:
        failed: dict[str, BaseException] = {}
        size = self.config.max_batch_size
        for start in range(0, len(work), size):
            chunk = work[start : start + size]
            requests = [request for request, _ in chunk]
            self.stats.engine_calls += 1
            self.stats.batch_sizes.append(len(requests))
            self.stats.rows += sum(r.sampling.n for r in requests)
            try:
                if is_continuous(backend):
                    answers = await backend.agenerate_batch(requests)  # type: ignore[attr-defined]
                else:
                    answers = await asyncio.to_thread(_generate_batch, backend, requests)
                _check_answers(backend, requests, answers)
            except Exception as exc:
                failed.update((s.cid, exc) for _, chunk_slots in chunk for s in chunk_slots)
                continue
            for (_, chunk_slots), completions in zip(chunk, answers):
                for slot, completion in zip(chunk_slots, completions):
                    self.cache.record(
                        slot.cid, backend.fingerprint, slot.request, slot.sample_index, completion
                    )
                    self.stats.misses += 1
        return failed


def _generate_batch(backend: Backend, requests: list[Request]) -> list[list[Completion]]:
    """``backend.generate_batch`` for a worker thread. A ``StopIteration`` (an iterator run dry
    inside an engine) becomes a ``RuntimeError``: asyncio cannot set it on the awaiting future,
    which would then never finish, and the run would hang instead of failing its shard."""
    try:
        return backend.generate_batch(requests)
    except StopIteration as exc:
        raise RuntimeError(f"{type(backend).__name__}.generate_batch raised StopIteration") from exc


def _engine_requests(
    request: Request, item_slots: list[_Slot], missing: list[_Slot]
) -> list[tuple[Request, list[_Slot]]]:
    """The whole request when no sample is known, else one single-sample request per gap."""
    if len(missing) == len(item_slots):
        return [(request, missing)]
    base = request.sampling
    return [
        (replace(request, sampling=replace(base, n=1, seed=base.seed + s.sample_index)), [s])
        for s in missing
    ]


def _check_answers(backend: Backend, requests: list[Request], answers: Any) -> None:
    name = type(backend).__name__
    if not isinstance(answers, list) or len(answers) != len(requests):
        got = len(answers) if isinstance(answers, list) else type(answers).__name__
        raise ValueError(
            f"{name}.generate_batch returned {got} answers for {len(requests)} requests"
        )
    for index, (request, completions) in enumerate(zip(requests, answers)):
        if len(completions) != request.sampling.n:
            raise ValueError(
                f"{name}.generate_batch returned {len(completions)} completions for request "
                f"{index} with n={request.sampling.n}"
            )
