"""Concurrent engine calls merge into one batch; a failing call fails alone."""

from __future__ import annotations

import threading
import time

import pytest

from ragfactory.tasks.llm.coalesce import CoalescingBackend
from ragfactory.tasks.llm.types import Request
from tests.fakes import ScriptedBackend


class SlowBackend(ScriptedBackend):
    """A scripted engine whose calls take ``seconds``, so others can queue behind one."""

    def __init__(self, seconds: float, **kwargs):
        super().__init__(**kwargs)
        self.seconds = seconds

    def generate_batch(self, requests):
        time.sleep(self.seconds)
        return super().generate_batch(requests)


def ask(text: str) -> Request:
    return Request.chat([{"role": "user", "content": text}])


def call_from_threads(engine: CoalescingBackend, batches: list[list[Request]], start_gap_s: float = 0.0):
    results: dict[int, object] = {}

    def run(index):
        try:
            results[index] = [[c.text for c in r] for r in engine.generate_batch(batches[index])]
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            results[index] = exc

    threads = []
    for index in range(len(batches)):
        threads.append(threading.Thread(target=run, args=(index,)))
        threads[-1].start()
        time.sleep(start_gap_s)
    for thread in threads:
        thread.join()
    return [results[i] for i in range(len(batches))]


def test_calls_waiting_on_a_busy_engine_go_out_as_one_batch():
    """Call 0 takes the engine for 0.3 s; calls 1, 2 and 3 arrive meanwhile and share the next
    engine call: 2 engine calls for 4 calls, each caller gets its own answers in order."""
    inner = SlowBackend(0.3, reply=lambda request, i: request.messages[-1].content.upper())
    engine = CoalescingBackend(inner, gather_s=0.02)
    batches = [[ask("a")], [ask("b"), ask("c")], [ask("d")], [ask("e")]]
    results = call_from_threads(engine, batches, start_gap_s=0.05)
    assert results == [[["A"]], [["B"], ["C"]], [["D"]], [["E"]]]
    assert [len(batch) for batch in inner.batches] == [1, 4]
    assert (engine.stats.calls, engine.stats.engine_calls, engine.stats.merged) == (4, 2, 1)


def test_a_call_that_fails_in_a_merged_batch_fails_alone():
    inner = SlowBackend(0.2, fail_when=lambda request: request.messages[-1].content == "bad")
    engine = CoalescingBackend(inner, gather_s=0.02)
    results = call_from_threads(engine, [[ask("first")], [ask("good")], [ask("bad")]], start_gap_s=0.05)
    assert results[0] == [["first|seed=0|sample=0"]] and results[1] == [["good|seed=0|sample=0"]]
    assert isinstance(results[2], RuntimeError)


def test_one_thread_alone_is_served_directly():
    inner = ScriptedBackend()
    engine = CoalescingBackend(inner, gather_s=0.0)
    [[completion]] = engine.generate_batch([ask("solo")])
    assert completion.text == "solo|seed=0|sample=0" and engine.fingerprint == inner.fingerprint


@pytest.mark.parametrize("answers", [[], [[]], [[], [], []]])
def test_an_engine_that_answers_the_wrong_number_is_an_error(answers):
    class Broken(ScriptedBackend):
        def generate_batch(self, requests):
            return answers

    with pytest.raises(ValueError, match="returned .* answers for 2 requests"):
        CoalescingBackend(Broken(), gather_s=0.0).generate_batch([ask("a"), ask("b")])
