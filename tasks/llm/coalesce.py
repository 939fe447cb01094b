"""One engine for every shard a process expands at once: concurrent engine calls merge.

Shards of a build (each strategy's, each question chunk's) run concurrently in one worker; each
has its own batcher, which calls the engine from a thread. ``CoalescingBackend`` sits between
them and the engine: a call that arrives while the engine is busy waits, and when the engine
frees up, every waiting call goes to it as one batch. A CPU decode step costs nearly the same
for 4 rows as for 8 (SmolLM2-135M on 2 cores: 142 vs 149 ms), so merging shards' calls is
throughput for free; outputs do not change, since a row's sample depends only on its own seed.

Before it takes the waiting calls, the thread that gets the engine waits ``gather_s`` for more:
a shard's next call comes a few milliseconds after its last one returned (the strategy parses,
retrieves, decides), and without the wait the engine would alternate between shards instead of
serving them together.

A merged call that fails is retried call by call, so one shard's bad request fails that shard
alone (the engine's own retries already ran inside each attempt).

A continuous engine (``is_continuous``: it batches in-flight sequences itself) needs none of
this: its calls pass straight through, ``agenerate_batch`` on the caller's event loop.

What it cannot do: a call that arrives just after the engine took a batch waits for that whole
batch to finish; a static-batch engine (transformers) only returns when its longest row ends.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ragfactory.tasks.llm.types import Backend, Completion, Request, is_continuous


@dataclass(eq=False)
class _Call:
    requests: list[Request]
    result: list[list[Completion]] | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass
class CoalesceStats:
    calls: int = 0  # generate_batch calls received
    engine_calls: int = 0  # calls made to the engine
    merged: int = 0  # engine calls that carried more than one call
    sizes: list[int] = field(default_factory=list)  # requests per engine call


class CoalescingBackend:
    """A ``Backend`` that merges the calls of concurrent threads into engine batches."""

    def __init__(self, backend: Backend, gather_s: float = 0.05):
        self.backend = backend
        self.gather_s = gather_s  # against an engine call of seconds, 50 ms is lost in the noise
        self.fingerprint = backend.fingerprint
        self.continuous = is_continuous(backend)
        self.stats = CoalesceStats()
        self._waiting: list[_Call] = []
        self._busy = False
        self._changed = threading.Condition()

    def __repr__(self) -> str:
        return f"CoalescingBackend({self.backend!r})"

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        call = _Call(list(requests))
        with self._changed:
            self.stats.calls += 1
            self._waiting.append(call)
            while not call.done and self._busy:
                self._changed.wait()
            if not call.done:  # the engine is free: this thread runs everything waiting
                self._busy = True
                self._changed.wait(self.gather_s)  # calls that arrive now join this batch
                calls, self._waiting = self._waiting, []
        if not call.done:
            try:
                self._run(calls)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[return-value]

    async def agenerate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        """A continuous engine's call, passed through (only used when ``continuous``)."""
        return await self.backend.agenerate_batch(requests)  # type: ignore[attr-defined]

    def _run(self, calls: list[_Call]) -> None:
        """Generate for ``calls`` as one batch; on failure, each call alone."""
        try:
            merged = self._engine([r for call in calls for r in call.requests], len(calls))
        except Exception as exc:
            if len(calls) == 1:
                self._finish(calls[0], error=exc)
                return
            for call in calls:
                try:
                    self._finish(call, self._engine(call.requests, 1))
                except Exception as single:
                    self._finish(call, error=single)
            return
        start = 0
        for call in calls:
            self._finish(call, merged[start : start + len(call.requests)])
            start += len(call.requests)

    def _engine(self, requests: list[Request], n_calls: int) -> list[list[Completion]]:
        self.stats.engine_calls += 1
        self.stats.merged += n_calls > 1
        self.stats.sizes.append(len(requests))
        answers = self.backend.generate_batch(requests)
        if len(answers) != len(requests):
            raise ValueError(f"{type(self.backend).__name__}.generate_batch returned {len(answers)} "
                             f"answers for {len(requests)} requests")
        return answers

    def _finish(self, call: _Call, result=None, error: BaseException | None = None) -> None:
        with self._changed:
            call.result, call.error, call.done = result, error, True
            self._changed.notify_all()
