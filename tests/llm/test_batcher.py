"""The batcher against a scripted backend: batch shapes, routing, failures."""

from __future__ import annotations

import asyncio
import json

import pytest

from ragfactory.tasks.llm.batcher import Batcher, BatcherConfig
from ragfactory.tasks.llm.cache import CallCache
from ragfactory.tasks.llm.types import Request
from tests.fakes import ContinuousScriptedBackend, ScriptedBackend


def ask(text: str, **sampling) -> Request:
    return Request.chat([{"role": "user", "content": text}], **sampling)


async def sequential_question(batcher: Batcher, qid: int, k: int) -> list[str]:
    """A question that awaits k model calls, each depending on the previous answer."""
    texts, last = [], ""
    for step in range(k):
        [completion] = await batcher.generate(ask(f"q{qid} step{step} after:{last[:12]}", seed=qid))
        last = completion.text
        texts.append(last)
    return texts


@pytest.mark.parametrize("n_questions,k", [(1, 1), (1, 3), (4, 2), (16, 3), (33, 5)])
def test_n_questions_k_steps_make_k_engine_calls_of_n(n_questions, k):
    backend = ScriptedBackend()
    batcher = Batcher(backend)

    async def main():
        jobs = [lambda q=q: sequential_question(batcher, q, k) for q in range(n_questions)]
        return await batcher.run_all(jobs, max_in_flight=n_questions)

    results = asyncio.run(main())
    assert [len(b) for b in backend.batches] == [n_questions] * k
    assert batcher.stats.engine_calls == k
    assert batcher.stats.mean_batch_size == n_questions
    # each answer is routed back to the question that asked
    for qid, texts in enumerate(results):
        assert all(text.startswith(f"q{qid} step{step} ") for step, text in enumerate(texts))


def test_max_in_flight_bounds_batches_and_keeps_result_order():
    backend = ScriptedBackend()
    batcher = Batcher(backend)

    async def main():
        jobs = [lambda q=q: sequential_question(batcher, q, 2) for q in range(10)]
        return await batcher.run_all(jobs, max_in_flight=4)

    results = asyncio.run(main())
    assert max(len(b) for b in backend.batches) == 4
    assert sum(len(b) for b in backend.batches) == 20
    assert [texts[0].split()[0] for texts in results] == [f"q{q}" for q in range(10)]


@pytest.mark.parametrize("fan_out", [2, 5])
def test_fan_out_inside_a_question_joins_one_batch(fan_out):
    backend = ScriptedBackend()
    batcher = Batcher(backend)

    async def question(qid: int):
        first = await batcher.generate(ask(f"q{qid} plan"))
        siblings = await asyncio.gather(*(batcher.generate(ask(f"q{qid} branch{b}")) for b in range(fan_out)))
        return first, siblings

    async def main():
        return await batcher.run_all([lambda q=q: question(q) for q in range(3)], max_in_flight=3)

    asyncio.run(main())
    assert [len(b) for b in backend.batches] == [3, 3 * fan_out]


def test_nested_run_all_counts_the_parent_as_waiting():
    backend = ScriptedBackend()
    batcher = Batcher(backend)

    async def question(q: int):
        subs = [lambda s=s: sequential_question(batcher, 10 * q + s, 2) for s in range(2)]
        return await batcher.run_all(subs, max_in_flight=2)

    async def main():
        return await batcher.run_all([lambda q=q: question(q) for q in range(2)], max_in_flight=2)

    asyncio.run(main())
    assert [len(b) for b in backend.batches] == [4, 4]


@pytest.mark.parametrize("max_batch_size,expected", [(4, [4, 4, 2]), (5, [5, 5]), (64, [10])])
def test_max_batch_size_splits_a_flush(max_batch_size, expected):
    backend = ScriptedBackend()
    batcher = Batcher(backend, config=BatcherConfig(max_batch_size=max_batch_size))

    async def main():
        jobs = [lambda q=q: batcher.generate(ask(f"q{q}")) for q in range(10)]
        return await batcher.run_all(jobs, max_in_flight=10)

    results = asyncio.run(main())
    assert [len(b) for b in backend.batches] == expected
    assert [r[0].text.split("|")[0] for r in results] == [f"q{q}" for q in range(10)]


def test_question_without_pending_request_delays_the_flush():
    """A question busy with something else (retrieval) is not waiting: the flush waits for it."""
    backend = ScriptedBackend()
    batcher = Batcher(backend)

    async def slow_question():
        await asyncio.sleep(0.05)  # e.g. a retrieval in a thread
        return await batcher.generate(ask("slow"))

    async def main():
        jobs = [slow_question] + [lambda q=q: batcher.generate(ask(f"q{q}")) for q in range(3)]
        return await batcher.run_all(jobs, max_in_flight=4)

    asyncio.run(main())
    assert [len(b) for b in backend.batches] == [4]


def test_n_samples_come_back_in_order_with_their_seeds():
    batcher = Batcher(ScriptedBackend())
    completions = asyncio.run(batcher.generate(ask("hi", n=3, seed=7, temperature=0.7)))
    assert [c.text for c in completions] == [f"hi|seed=7|sample={i}" for i in range(3)]
    assert len({c.call_id for c in completions}) == 3


def test_backend_exception_reaches_every_waiting_question():
    backend = ScriptedBackend(fail_when=lambda r: "bad" in r.messages[-1].content)
    batcher = Batcher(backend)

    async def main():
        jobs = [lambda: batcher.generate(ask("ok")), lambda: batcher.generate(ask("bad"))]
        return await batcher.run_all(jobs, max_in_flight=2)

    with pytest.raises(RuntimeError, match="scripted failure"):
        asyncio.run(main())
    assert backend.calls == 0


def test_backend_exception_propagates_to_all_gathered_requests():
    batcher = Batcher(ScriptedBackend(fail_times=1))

    async def main():
        return await asyncio.gather(*(batcher.generate(ask(f"q{q}")) for q in range(3)), return_exceptions=True)

    outcomes = asyncio.run(main())
    assert [type(o) for o in outcomes] == [RuntimeError] * 3


@pytest.mark.timeout(30)
def test_a_backend_raising_stop_iteration_fails_the_call_instead_of_hanging():
    """asyncio cannot set StopIteration on a future: unconverted, the awaiting call never ends."""

    def reply(request, sample):
        return next(iter([]))

    with pytest.raises(RuntimeError, match="ScriptedBackend.generate_batch raised StopIteration"):
        asyncio.run(Batcher(ScriptedBackend(reply=reply)).generate(ask("hi")))


@pytest.mark.parametrize("answers", [[], [[]]])
def test_malformed_backend_answer_is_an_error_naming_the_backend(answers):
    class Broken(ScriptedBackend):
        def generate_batch(self, requests):
            return answers

    with pytest.raises(ValueError, match="Broken.generate_batch returned"):
        asyncio.run(Batcher(Broken()).generate(ask("hi")))


def test_empty_completion_is_returned_as_is():
    batcher = Batcher(ScriptedBackend(reply=lambda r, i: "", finish_reason="length"))
    [completion] = asyncio.run(batcher.generate(ask("hi")))
    assert (completion.text, completion.finish_reason) == ("", "length")


def test_roles_route_to_their_backends_in_one_flush():
    policy, judge = ScriptedBackend(fingerprint="p"), ScriptedBackend(fingerprint="j")
    batcher = Batcher({"policy": policy, "judge": judge})

    async def question(q):
        a, b = await asyncio.gather(
            batcher.generate(ask(f"q{q}")),
            batcher.generate(Request.chat([{"role": "user", "content": f"j{q}"}], role="judge")),
        )
        return a[0].text, b[0].text

    async def main():
        return await batcher.run_all([lambda q=q: question(q) for q in range(3)], max_in_flight=3)

    results = asyncio.run(main())
    assert [len(b) for b in policy.batches] == [3] and [len(b) for b in judge.batches] == [3]
    assert results[1] == ("q1|seed=0|sample=0", "j1|seed=0|sample=0")


def test_unknown_role_is_refused_in_the_caller():
    batcher = Batcher({"policy": ScriptedBackend()})
    bad = Request.chat([{"role": "user", "content": "x"}], role="critic")
    with pytest.raises(KeyError, match="critic"):
        asyncio.run(batcher.generate(bad))


def test_identical_pending_calls_are_generated_once():
    backend = ScriptedBackend()
    batcher = Batcher(backend)

    async def main():
        jobs = [lambda: batcher.generate(ask("same", seed=1)) for _ in range(4)]
        return await batcher.run_all(jobs, max_in_flight=4)

    results = asyncio.run(main())
    assert [len(b) for b in backend.batches] == [1]
    assert len({r[0].call_id for r in results}) == 1


def test_partly_cached_request_asks_only_for_missing_samples():
    backend = ScriptedBackend()
    cache = CallCache("run-a")
    batcher = Batcher(backend, cache)
    first = asyncio.run(batcher.generate(ask("hi", n=2, seed=5, temperature=1.0)))
    more = asyncio.run(batcher.generate(ask("hi", n=4, seed=5, temperature=1.0)))
    sub = backend.batches[1]
    assert [(r.sampling.n, r.sampling.seed) for r in sub] == [(1, 7), (1, 8)]
    assert [c.text for c in more[:2]] == [c.text for c in first]
    assert [c.cached for c in more] == [True, True, False, False]
    assert more[3].text == "hi|seed=8|sample=0"  # sample 3 of seed 5 is sample 0 of seed 8


def test_a_free_role_drops_the_grammar_before_the_engine_and_the_call_id():
    from ragfactory.tasks.llm.types import Grammar

    grammar = Grammar("g", 'start: "x"\n', 2)
    backend = ScriptedBackend()
    cache = CallCache("run")
    batcher = Batcher({"policy": backend, "judge": backend}, cache, free_roles=frozenset({"judge"}))
    policy = Request.chat([{"role": "user", "content": "a"}], grammar=grammar)
    judge = Request.chat([{"role": "user", "content": "a"}], grammar=grammar, role="judge")

    async def main():
        return await asyncio.gather(batcher.generate(policy), batcher.generate(judge))

    asyncio.run(main())
    [batch] = backend.batches
    assert [r.sampling.grammar for r in batch] == [grammar, None]
    keys = sorted(json.loads(row["sampling"]).get("grammar", {}).get("name", "-") for row in cache.rows())
    assert keys == ["-", "g"]


def test_a_continuous_engine_gets_requests_without_waiting_for_a_busy_question():
    """The lock-step case above, with a continuous engine: the three ready requests go at once,
    the busy question's follows alone when it exists."""
    backend = ContinuousScriptedBackend(delay_s=0.01)
    batcher = Batcher(backend)

    async def slow_question():
        await asyncio.sleep(0.05)
        return await batcher.generate(ask("slow"))

    async def main():
        jobs = [slow_question] + [lambda q=q: batcher.generate(ask(f"q{q}")) for q in range(3)]
        return await batcher.run_all(jobs, max_in_flight=4)

    results = asyncio.run(main())
    assert [[r.messages[-1].content for r in b] for b in backend.batches] == [["q0", "q1", "q2"], ["slow"]]
    assert [r[0].text for r in results] == ["slow|seed=0|sample=0"] + [f"q{q}|seed=0|sample=0" for q in range(3)]


def test_a_continuous_engine_takes_a_new_request_while_another_call_runs():
    """q0 asks at 0 s and its call takes 0.1 s; q1 asks at 0.02 s: two calls overlap, and q1's
    answer comes back before q0's."""
    backend = ContinuousScriptedBackend(delay_s=0.1)
    batcher = Batcher(backend)
    order = []

    async def question(q: int, after: float):
        await asyncio.sleep(after)
        [completion] = await batcher.generate(ask(f"q{q}"))
        order.append(q)
        return completion.text

    async def main():
        return await batcher.run_all([lambda: question(0, 0.0), lambda: question(1, 0.02)], max_in_flight=2)

    assert asyncio.run(main()) == ["q0|seed=0|sample=0", "q1|seed=0|sample=0"]
    assert backend.max_overlap == 2 and batcher.stats.engine_calls == 2
    assert order == [0, 1]  # same delay: q0's call, started first, ends first


def test_an_equal_request_joins_the_running_call_instead_of_a_second_one():
    """Two questions ask the same thing 0.02 s apart, the first call still running: the second
    waits on it, so the engine answers once ('#1') and both read that row."""
    backend = ContinuousScriptedBackend(delay_s=0.05, numbered=True)
    cache = CallCache("r")
    batcher = Batcher(backend, cache)

    async def question(after: float):
        await asyncio.sleep(after)
        [completion] = await batcher.generate(ask("same", seed=3))
        return completion.text

    async def main():
        return await batcher.run_all([lambda: question(0.0), lambda: question(0.02)], max_in_flight=2)

    assert asyncio.run(main()) == ["same|seed=3|sample=0#1", "same|seed=3|sample=0#1"]
    assert len(backend.batches) == 1
    assert [row["text"] for row in cache.rows()] == ["same|seed=3|sample=0#1"]


def test_a_shared_scheduler_hands_a_continuous_engine_its_calls_on_the_askers_loop():
    from ragfactory.tasks.llm.scheduler import Scheduler

    backend = ContinuousScriptedBackend(delay_s=0.0)
    shared = Scheduler(backend)
    assert shared.continuous and not Scheduler(ScriptedBackend()).continuous
    batcher = Batcher(shared)
    asyncio.run(batcher.run_all([lambda: batcher.generate(ask("a"))], max_in_flight=1))
    assert backend.max_overlap == 1 and shared.stats.engine_calls == 1  # through agenerate_batch
