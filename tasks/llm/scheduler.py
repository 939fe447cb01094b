"""The request scheduler: one queue in front of each engine, bounded by count and by tokens.

The one place the batching policy lives. Its shape follows vLLM's v1 engine core (one waiting
queue; each step *schedules* what fits, *executes* one engine call, *updates* the callers);
the per-question side (questions of a shard, ``run_all``) is ``tasks/llm/batcher.py``::

    strategy code (one coroutine per question: ``await batcher.generate(request)``)
         |   question A    question B    question C          shard 1 (its own event loop)
         v                                                   shard 2 ... (other threads)
    Batcher (per shard): holds its requests until every question of the shard waits
         |   (settle rounds: siblings of an ``asyncio.gather`` join the same submission)
         v   submit (on the shard's thread)
    +-- Scheduler (one per engine per process) ---------------------------------------+
    | lookup: call cache per (request, sample) -> hits answer at once, no engine call;  |
    |         a call id already queued or running -> wait on that entry (generated once)|
    |         partly cached request -> one single-sample entry per missing sample       |
    | queue:  entries, first come first served, from every shard of the process         |
    | schedule: admit from the head while  requests <= max_batch_size  and              |
    |           sum(n * (prompt tokens + max_tokens)) <= max_batch_tokens               |
    |   static engine: one step at a time on the engine thread; it starts when every    |
    |                  attached shard has submitted, or gather_s after the first entry  |
    |   continuous engine: entries go as soon as the tokens in flight allow, calls of   |
    |                  at most max_batch_size per event loop, many in flight at once    |
    | execute: engine call, retried by the engine's ``RetryPolicy``; a merged call that |
    |          still fails is run again shard by shard, so one shard's bad request      |
    |          fails that shard alone                                                   |
    | update: each answer recorded in the asking shard's call cache, on its own loop    |
    +----------------------------------------------------------------------------------+

Back-pressure: an entry that is not admitted stays queued and its question simply waits, so
more questions make a build take longer, never hold more tokens in one engine call (or in
flight, for a continuous engine) than ``max_batch_tokens``. One request larger than the whole
budget is admitted alone, when nothing else runs, rather than never. Prompt tokens are
estimated cheaply: the backend's ``count_tokens(request)`` if it has one, else characters / 3.

Sample ``i`` of a request with seed ``s`` is, by contract, sample 0 of seed ``s + i``: a row's
output never depends on the batch it rode in. Limits come from each shard's ``BatcherConfig``;
shards with different limits on one engine get the smallest of each.

What it cannot do: an entry queued just after a static step started waits that whole step (its
longest row); a continuous call runs on the loop of the shard that asked first, so a shard
that joined it fails with it if that loop closes first (its shard was cancelled).
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from ragfactory.tasks.llm.queue_items import Ask, Entry, SchedulerStats, Slot, estimate_tokens
from ragfactory.tasks.llm.types import (
    Backend,
    Completion,
    Request,
    RetryPolicy,
    check_answers,
    generate_checked,
    is_continuous,
)

NO_RETRY = RetryPolicy(attempts=1)
_STATS = threading.Lock()  # a shard's stats are updated from the engine thread and its loop


class Scheduler:
    """The queue in front of one engine; ``Batcher`` objects (shards) attach and submit."""

    def __init__(
        self,
        backend: Backend,
        retry: RetryPolicy = NO_RETRY,
        gather_s: float = 0.05,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.backend = backend
        self.fingerprint = backend.fingerprint
        self.continuous = is_continuous(backend)
        self.retry = retry  # the engine's own retries, run here (``RetryingBackend`` unwrapped)
        self.gather_s = gather_s  # against an engine call of seconds, 50 ms is lost in the noise
        self.sleep = sleep
        self.stats = SchedulerStats()
        self._clients: weakref.WeakSet = weakref.WeakSet()
        self._queue: deque[Entry] = deque()
        self._by_cid: dict[str, Entry] = {}  # queued or running entries, by the ids they make
        self._running_tokens = 0
        self._running = 0
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()

    def attach(self, client: Any) -> None:
        with self._cond:
            self._clients.add(client)

    @property
    def queued(self) -> int:  # entries waiting for admission
        return len(self._queue)

    def poke(self) -> None:
        """A shard has submitted all it will: a gathering step may start now."""
        with self._cond:
            self._cond.notify_all()

    # -- lookup and queueing (on the submitting shard's thread) ------------------------------

    def submit(self, asks: list[Ask]) -> None:
        """Answer cached samples, queue the rest (each call id once), wake the engine."""
        if not asks:
            return
        client = asks[0].client
        rows = client.cache.fetch(s.cid for ask in asks for s in ask.slots)
        with _STATS:
            client.stats.hits += sum(s.cid in rows for ask in asks for s in ask.slots)
        with self._cond:
            for ask in asks:
                ask.hits = frozenset(s.cid for s in ask.slots if s.cid in rows)
                self._plan(ask, [s for s in ask.slots if s.cid not in ask.hits])
            if self.continuous:
                self._dispatch()
            elif self._queue and self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="llm-scheduler", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        for ask in asks:
            if not ask.entries:
                _land(ask, None, None, None)

    def _plan(self, ask: Ask, missing: list[Slot]) -> None:
        joined = {id(e): e for s in missing if (e := self._by_cid.get(s.cid)) is not None}
        new = [s for s in missing if s.cid not in self._by_cid]
        for entry in joined.values():
            entry.asks.append(ask)
            ask.entries.append(entry)
        if not new:
            return
        if len(new) == len(ask.slots):
            work = [(ask.request, new)]
        else:  # sample i of seed s is sample 0 of seed s + i
            base = ask.request.sampling
            work = [
                (replace(ask.request, sampling=replace(base, n=1, seed=base.seed + s.sample_index)), [s]) for s in new
            ]
        for request, slots in work:
            entry = Entry(request, slots, estimate_tokens(self.backend, request), ask.client, ask.loop, [ask])
            ask.entries.append(entry)
            self._by_cid.update((s.cid, entry) for s in slots)
            self._queue.append(entry)

    def cancel(self, ask: Ask) -> None:
        """A question gave up: entries no other question waits on leave the queue."""
        with self._cond:
            for entry in ask.entries:
                if ask in entry.asks:
                    entry.asks.remove(ask)
                if not entry.asks and entry in self._queue:
                    self._queue.remove(entry)
                    self._forget([entry])

    def _forget(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            for slot in entry.slots:
                if self._by_cid.get(slot.cid) is entry:
                    del self._by_cid[slot.cid]

    # -- schedule -----------------------------------------------------------------------------

    def limits(self) -> tuple[int, int]:
        """(requests, tokens) per engine call: the smallest any attached shard asks for."""
        configs = [client.config for client in list(self._clients)]
        return (
            min((c.max_batch_size for c in configs), default=1 << 30),
            min((c.max_batch_tokens for c in configs), default=1 << 62),
        )

    def _admit(self) -> list[Entry]:
        """Entries from the head of the queue that fit beside what runs (called locked)."""
        size, budget = self.limits()
        batch: list[Entry] = []
        tokens = self._running_tokens
        while self._queue and len(batch) < size:
            entry = self._queue[0]
            if (batch or self._running) and tokens + entry.tokens > budget:
                break
            batch.append(self._queue.popleft())
            tokens += entry.tokens
        self._running += len(batch)
        self._running_tokens = tokens
        self.stats.peak_tokens = max(self.stats.peak_tokens, tokens)
        return batch

    def _release(self, batch: list[Entry]) -> None:
        with self._cond:
            self._running -= len(batch)
            self._running_tokens -= sum(e.tokens for e in batch)
            self._forget(batch)
            if self.continuous:
                self._dispatch()

    def _gathered(self) -> bool:
        size, budget = self.limits()
        if len(self._queue) >= size or sum(e.tokens for e in self._queue) >= budget:
            return True
        return all(client.settled for client in list(self._clients))

    # -- static engines: one step at a time on the engine thread ------------------------------

    def _serve(self) -> None:
        while True:
            with self._cond:
                deadline = time.monotonic() + self.gather_s
                while self._queue and not self._gathered() and time.monotonic() < deadline:
                    self._cond.wait(max(0.0, deadline - time.monotonic()))
                batch = self._admit()
                if not batch:
                    self._thread = None
                    return
            try:
                outcomes = self._execute(batch)
            except BaseException as exc:  # a bug here must fail the questions, not hang them
                outcomes = [(batch, exc)]
            self._release(batch)
            self._update(outcomes)

    def _execute(self, batch: list[Entry]) -> list[tuple[list[Entry], Any]]:
        try:
            return [(batch, self._engine(batch))]
        except Exception as exc:
            shards = _by_owner(batch)
            if len(shards) < 2:
                return [(batch, exc)]
        self.stats.split += 1
        outcomes = []
        for entries in shards:
            try:
                outcomes.append((entries, self._engine(entries)))
            except Exception as exc:
                outcomes.append((entries, exc))
        return outcomes

    def _engine(self, entries: list[Entry]) -> list[list[Completion]]:
        requests = self._count(entries)
        answers = self.retry.call(generate_checked, self.backend, requests, sleep=self.sleep)
        check_answers(self.backend, requests, answers)
        self._count_prefill(entries, requests, answers)
        return answers

    def _count(self, entries: list[Entry]) -> list[Request]:
        with _STATS:
            self.stats.engine_calls += 1
            self.stats.batch_sizes.append(len(entries))
            self.stats.batch_tokens.append(sum(e.tokens for e in entries))
            self.stats.merged += len({id(e.owner) for e in entries}) > 1
        return [e.request for e in entries]

    def _count_prefill(self, entries: list[Entry], requests: list[Request], answers: list[list[Completion]]) -> None:
        """An engine call's prompt tokens, and the tokens its prefill computed where the engine
        counts them (``computed_tokens(requests)`` of that call, else ``prefill_counts``' latest):
        the engine's in total, each shard's by its prompt share."""
        own = getattr(self.backend, "computed_tokens", None)
        counts = getattr(self.backend, "prefill_counts", None)
        prompts = {id(e): sum(c.prompt_tokens for c in a) for e, a in zip(entries, answers)}
        total = sum(prompts.values())
        computed = own(requests) if own is not None else counts.last_computed_tokens if counts is not None else 0
        with _STATS:
            self.stats.prompt_tokens += total
            self.stats.prefilled_tokens += computed
            for owned in _by_owner(entries):
                share = sum(prompts[id(e)] for e in owned)
                owned[0].owner.stats.prompt_tokens += share
                owned[0].owner.stats.prefilled_tokens += round(computed * share / total) if total else 0

    # -- continuous engines: calls on the askers' loops, many in flight ------------------------

    def _dispatch(self) -> None:
        """Start a call per event loop for every entry that fits now (called locked)."""
        while batch := self._admit():
            self._launch(batch)

    def _launch(self, batch: list[Entry]) -> None:
        calls: dict[int, list[Entry]] = {}
        for entry in batch:
            calls.setdefault(id(entry.loop), []).append(entry)
        for entries in calls.values():
            try:
                asyncio.run_coroutine_threadsafe(self._acall(entries), entries[0].loop)
            except RuntimeError as exc:  # the loop closed: its questions are gone
                self._running -= len(entries)
                self._running_tokens -= sum(e.tokens for e in entries)
                self._forget(entries)
                self._update([(entries, exc)])

    async def _acall(self, entries: list[Entry]) -> None:
        outcome: Any = RuntimeError("the engine call was cancelled")
        try:
            requests = self._count(entries)
            answers = await self.retry.acall(self.backend.agenerate_batch, requests)  # type: ignore[attr-defined]
            check_answers(self.backend, requests, answers)
            self._count_prefill(entries, requests, answers)
            outcome = answers
        except Exception as exc:
            outcome = exc
        finally:  # cancelled too: every question waiting on these entries hears of it
            self._release(entries)
            self._update([(entries, outcome)])

    # -- update ---------------------------------------------------------------------------------

    def _update(self, outcomes: list[tuple[list[Entry], Any]]) -> None:
        """Hand each entry's answers (or the error) to every question waiting on it: one
        callback per event loop, so a shard's questions all resume in the same loop turn."""
        deliveries: dict[int, tuple[asyncio.AbstractEventLoop, list]] = {}
        for entries, outcome in outcomes:
            failed = isinstance(outcome, BaseException)
            if not failed:
                _count_shares(entries)
            for index, entry in enumerate(entries):
                answers, error = (None, outcome) if failed else (outcome[index], None)
                for ask in list(entry.asks):
                    ask.client.settled = False  # its questions resume: it will ask again
                    deliveries.setdefault(id(ask.loop), (ask.loop, []))[1].append((ask, entry, answers, error))
        for loop, items in deliveries.values():
            try:
                loop.call_soon_threadsafe(_land_all, items, self.fingerprint)
            except RuntimeError:  # that shard's loop has closed: its questions are gone
                pass


def _count_shares(entries: list[Entry]) -> None:
    """Each shard's share of one engine call, in its own stats."""
    with _STATS:
        for owned in _by_owner(entries):
            stats = owned[0].owner.stats
            stats.engine_calls += 1
            stats.batch_sizes.append(len(owned))
            rows = sum(e.request.sampling.n for e in owned)
            stats.rows += rows
            stats.misses += rows


def _land_all(items: list, fingerprint: str) -> None:
    for ask, entry, answers, error in items:
        _land(ask, entry, answers, error, fingerprint)


def _land(ask: Ask, entry: Entry | None, answers, error: BaseException | None, fingerprint: str = "") -> None:
    """On the asker's loop: record the entry's rows in its cache; answer when all are in."""
    if ask.future.done():
        return
    if error is not None:
        ask.client.settle(ask)
        ask.future.set_exception(error)
        return
    cache = ask.client.cache
    if entry is not None:
        ask.entries.remove(entry)
        for slot, completion in zip(entry.slots, answers):
            cache.record(slot.cid, fingerprint, slot.request, slot.sample_index, completion)
    if ask.entries:
        return
    from ragfactory.tasks.llm.cache import completion_from_row

    found = cache.fetch(s.cid for s in ask.slots)
    ask.client.settle(ask)
    ask.future.set_result([completion_from_row(found[s.cid], s.cid in ask.hits) for s in ask.slots])


def _by_owner(entries: list[Entry]) -> list[list[Entry]]:
    shards: dict[int, list[Entry]] = {}
    for entry in entries:
        shards.setdefault(id(entry.owner), []).append(entry)
    return list(shards.values())
