"""The request scheduler against scripted engines: admission by count and by tokens,
back-pressure, shards of several threads sharing engine calls, failures, cancellation, retries,
continuous engines, cache hits and stats (``tasks/llm/scheduler.py``)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ragfactory.tasks.llm.batcher import Batcher, BatcherConfig
from ragfactory.tasks.llm.cache import CallCache, MemoryCallStore
from ragfactory.tasks.llm.engine import RetryingBackend, scheduled
from ragfactory.tasks.llm.queue_items import estimate_tokens
from ragfactory.tasks.llm.scheduler import Scheduler
from ragfactory.tasks.llm.types import Request, RetryPolicy
from tests.fakes import ContinuousScriptedBackend, GatedBackend, ScriptedBackend


def ask(text: str, **sampling) -> Request:
    return Request.chat([{"role": "user", "content": text}], **sampling)


def sized(name: str, tokens: int) -> Request:
    """A request the scheduler estimates at ``tokens``: 30 characters (10 tokens) + max_tokens."""
    return ask(name.ljust(30, "."), max_tokens=tokens - 10)


def contents(backend) -> list[list[str]]:
    return [[r.messages[-1].content.rstrip(".") for r in batch] for batch in backend.batches]


def wait_for(condition, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.002)


def test_token_estimates_count_every_sample_of_prompt_and_max_tokens():
    assert estimate_tokens(ScriptedBackend(), sized("a", 30)) == 30
    assert estimate_tokens(ScriptedBackend(), ask("x" * 31, max_tokens=20)) == 11 + 20  # ceil(31/3)
    assert estimate_tokens(GatedBackend(), ask("three words here", n=2, max_tokens=7)) == 2 * (3 + 7)


@pytest.mark.parametrize(
    "size,budget,expected",
    [
        (64, 100, [["a", "b"], ["c"]]),  # 30 + 50 fit in 100; + 40 would not
        (64, 79, [["a"], ["b"], ["c"]]),  # 30 + 50 = 80 > 79
        (64, 120, [["a", "b", "c"]]),
        (2, 1000, [["a", "b"], ["c"]]),  # by count
        (64, 20, [["a"], ["b"], ["c"]]),  # each alone is over the budget: admitted alone, not never
    ],
)
def test_admission_by_count_and_by_tokens(size, budget, expected):
    backend = ScriptedBackend()
    batcher = Batcher(backend, config=BatcherConfig(max_batch_size=size, max_batch_tokens=budget))

    async def main():
        return await asyncio.gather(*(batcher.generate(sized(n, t)) for n, t in [("a", 30), ("b", 50), ("c", 40)]))

    results = asyncio.run(main())
    assert contents(backend) == expected
    assert [r[0].text.split(".")[0] for r in results] == ["a", "b", "c"]


def test_many_questions_take_more_steps_never_more_tokens():
    """24 questions of 3 dependent 40-token requests under a 100-token budget: two per engine call."""
    backend = ScriptedBackend()
    batcher = Batcher(backend, config=BatcherConfig(max_batch_tokens=100))

    async def question(q: int) -> list[str]:
        return [(await batcher.generate(sized(f"q{q}s{s}", 40)))[0].text.split(".")[0] for s in range(3)]

    results = asyncio.run(batcher.run_all([lambda q=q: question(q) for q in range(24)], max_in_flight=24))
    assert results == [[f"q{q}s{s}" for s in range(3)] for q in range(24)]
    stats = batcher.scheduler_for("policy").stats
    assert max(stats.batch_tokens) == 80 and stats.peak_tokens == 80
    assert max(stats.batch_sizes) == 2 and sum(stats.batch_sizes) == 72


def two_shards(first: list[str], second: list[str], **kwargs):
    """Shard A asks ``a0`` (the engine holds it at the gate) then ``first``; shard B, on another
    thread and loop, asks ``second`` while ``a0`` runs. Returns the engine, scheduler, outcomes."""
    backend = GatedBackend(**kwargs)
    shared = Scheduler(backend, gather_s=30.0)  # only a shard's submission may start a step
    batchers = [Batcher(shared, CallCache(f"run-{side}")) for side in "ab"]
    outcomes: dict[str, object] = {}

    async def question(batcher, texts):
        return [(await batcher.generate(ask(t)))[0].text for t in texts]

    def shard(side, batcher, texts):
        try:
            outcomes[side] = asyncio.run(batcher.run_all([lambda: question(batcher, texts)], 1))[0]
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcomes[side] = exc

    threads = [threading.Thread(target=shard, args=("a", batchers[0], ["a0", *first]))]
    threads[0].start()
    wait_for(backend.entered.is_set)
    threads.append(threading.Thread(target=shard, args=("b", batchers[1], second)))
    threads[1].start()
    wait_for(lambda: shared.queued == len(second))
    backend.gate.set()
    for thread in threads:
        thread.join(timeout=30)
    return backend, shared, batchers, outcomes


def test_shards_on_two_threads_share_the_next_engine_call():
    backend, shared, (a, b), outcomes = two_shards(["a1"], ["b0"])
    assert contents(backend) == [["a0"], ["b0", "a1"]]
    assert outcomes == {"a": ["a0|seed=0|sample=0", "a1|seed=0|sample=0"], "b": ["b0|seed=0|sample=0"]}
    assert (shared.stats.engine_calls, shared.stats.merged) == (2, 1)
    assert (a.stats.batch_sizes, b.stats.batch_sizes) == ([1, 1], [1])


def test_a_merged_call_that_fails_is_run_again_shard_by_shard():
    backend, shared, _, outcomes = two_shards(["a1"], ["bad"], fail_when=lambda r: r.messages[-1].content == "bad")
    assert outcomes["a"] == ["a0|seed=0|sample=0", "a1|seed=0|sample=0"]
    assert isinstance(outcomes["b"], RuntimeError)
    assert contents(backend) == [["a0"], ["a1"]] and backend.attempts == 4 and shared.stats.split == 1


def test_an_identical_call_from_two_shards_is_generated_once_and_recorded_by_both():
    backend, shared, (a, b), outcomes = two_shards(["same"], ["same"])
    assert contents(backend) == [["a0"], ["same"]]
    assert outcomes["a"][1] == outcomes["b"][0] == "same|seed=0|sample=0"
    assert [(r["run_id"], r["text"]) for r in b.cache.rows()] == [("run-b", "same|seed=0|sample=0")]
    assert len(a.cache.rows()) == 2 and (a.stats.misses, b.stats.misses) == (1, 1)


def test_a_cancelled_question_leaves_the_queue_before_the_engine_sees_it():
    backend = GatedBackend()
    batcher = Batcher(backend)
    scheduler = batcher.scheduler_for("policy")

    async def main():
        first = asyncio.create_task(batcher.generate(ask("x")))
        while not backend.entered.is_set():
            await asyncio.sleep(0.005)
        second = asyncio.create_task(batcher.generate(ask("y")))
        while scheduler.queued < 1:
            await asyncio.sleep(0.005)
        second.cancel()
        await asyncio.sleep(0)
        backend.gate.set()
        return await first, second

    (done, second) = asyncio.run(main())
    assert done[0].text == "x|seed=0|sample=0" and second.cancelled()
    assert contents(backend) == [["x"]] and scheduler.queued == 0


def test_the_engine_retries_run_in_the_scheduler():
    inner, waits = ScriptedBackend(fail_times=2), []
    policy = RetryPolicy(attempts=3, backoff_s=0.5)
    shared = scheduled(RetryingBackend(inner, policy, waits.append))
    assert shared.backend is inner and shared.retry is policy
    [completion] = asyncio.run(Batcher(shared).generate(ask("x")))
    assert completion.text == "x|seed=0|sample=0"
    assert waits == [0.5, 1.0] and inner.attempts == 3 and shared.stats.engine_calls == 1


def test_a_continuous_engine_gets_no_more_tokens_in_flight_than_the_budget():
    """Five 40-token requests at once under 100 tokens: calls of 2, 2, 1, one at a time."""
    backend = ContinuousScriptedBackend(delay_s=0.01)
    batcher = Batcher(backend, config=BatcherConfig(max_batch_tokens=100))

    async def main():
        return await asyncio.gather(*(batcher.generate(sized(f"q{q}", 40)) for q in range(5)))

    results = asyncio.run(main())
    assert [r[0].text.split(".")[0] for r in results] == [f"q{q}" for q in range(5)]
    assert [len(b) for b in backend.batches] == [2, 2, 1] and backend.max_overlap == 1
    assert batcher.scheduler_for("policy").stats.peak_tokens == 80


def test_a_continuous_engine_takes_calls_of_max_batch_size_all_at_once_within_the_budget():
    """Five requests, calls of at most 2, tokens to spare: three calls in flight together."""
    backend = ContinuousScriptedBackend(delay_s=0.05)
    batcher = Batcher(backend, config=BatcherConfig(max_batch_size=2))

    async def main():
        return await asyncio.gather(*(batcher.generate(ask(f"q{q}")) for q in range(5)))

    asyncio.run(main())
    assert sorted(contents(backend)) == [["q0", "q1"], ["q2", "q3"], ["q4"]] and backend.max_overlap == 3


def test_a_continuous_engine_runs_each_shards_calls_on_that_shards_loop():
    backend = ContinuousScriptedBackend(
        lambda r, i: f"{r.messages[-1].content}@{threading.current_thread().name}", delay_s=0.02
    )
    shared = Scheduler(backend)
    outcomes = {}

    def shard(side):
        batcher = Batcher(shared)
        outcomes[side] = asyncio.run(
            batcher.run_all([lambda: asyncio.gather(*(batcher.generate(ask(f"{side}{q}")) for q in range(2)))], 1)
        )[0]

    threads = [threading.Thread(target=shard, args=(side,), name=f"shard-{side}") for side in "ab"]
    [t.start() for t in threads]
    [t.join(timeout=30) for t in threads]
    assert {side: [r[0].text for r in rows] for side, rows in outcomes.items()} == {
        side: [f"{side}{q}@shard-{side}" for q in range(2)] for side in "ab"
    }
    assert sorted(contents(backend)) == [["a0", "a1"], ["b0", "b1"]]


def test_stats_count_hits_engine_calls_and_rows():
    """a is cached; b (n=2) and c go in one engine call: 2 requests, 3 rows, 1 hit, 3 misses."""
    first = CallCache("run-1")
    asyncio.run(Batcher(ScriptedBackend(), first).generate(ask("a")))
    backend = ScriptedBackend()
    batcher = Batcher(backend, CallCache("run-2", MemoryCallStore(first.rows())))

    async def main():
        return await asyncio.gather(
            batcher.generate(ask("a")), batcher.generate(ask("b", n=2, temperature=1.0)), batcher.generate(ask("c"))
        )

    a, _, _ = asyncio.run(main())
    assert a[0].cached and contents(backend) == [["b", "c"]]
    assert batcher.stats.as_dict() == {
        "requests": 3,
        "flushes": 1,
        "engine_calls": 1,
        "mean_batch_size": 2.0,
        "max_batch_size": 2,
        "rows": 3,
        "hits": 1,
        "misses": 3,
        "prompt_tokens": 3,  # the scripted engine's one prompt token a row
        "prefilled_tokens": 0,  # it does not count its prefill
    }


class PrefillingBackend(ScriptedBackend):
    """A scripted engine that reports prefilling half of each call's prompt tokens."""

    def __init__(self):
        super().__init__()
        from ragfactory.tasks.llm.prefill import PrefillCounts

        self.prefill_counts = PrefillCounts()

    def generate_batch(self, requests):
        answers = super().generate_batch(requests)
        self.prefill_counts.start(sum(c.prompt_tokens for a in answers for c in a))
        self.prefill_counts.add(self.prefill_counts.last_prompt_tokens // 2)
        return answers


def test_stats_share_an_engine_calls_prefill_among_its_shards():
    """Two shards in one engine call: each gets its rows' prompt tokens and the part of the
    call's prefilled tokens they make up; the scheduler keeps the engine's totals."""
    scheduler = Scheduler(PrefillingBackend())
    one, two = Batcher(scheduler), Batcher(scheduler)

    async def shard(batcher, texts):
        return await asyncio.gather(*(batcher.generate(ask(t, n=2, temperature=1.0)) for t in texts))

    async def main():
        await asyncio.gather(shard(one, ["a"]), shard(two, ["b", "c", "d"]))

    asyncio.run(main())
    assert scheduler.stats.prompt_tokens == 8 and scheduler.stats.prefilled_tokens == 4
    assert [one.stats.prompt_tokens, two.stats.prompt_tokens] == [2, 6]
    assert [one.stats.prefilled_tokens, two.stats.prefilled_tokens] == [1, 3]
