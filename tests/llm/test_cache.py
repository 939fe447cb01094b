"""Content-addressed completions: call ids, cache hits, identical rebuilds."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.cache import CallCache, MemoryCallStore
from ragfactory.tasks.llm.seeds import derive_seed
from ragfactory.tasks.llm.types import Message, Request, call_id
from tests.fakes import ScriptedBackend

BASE = Request.chat(
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "who?"}],
    temperature=0.7,
    max_tokens=32,
    seed=11,
)


class TickingClock:
    """A clock that moves one second per reading, so a re-generated row would differ."""

    def __init__(self):
        self.now = datetime(2025, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def test_call_id_is_stable():
    assert call_id("m", BASE, 0) == call_id("m", replace(BASE), 0)
    assert call_id("m", BASE, 0) == call_id("m", replace(BASE, role="judge"), 0)


@pytest.mark.parametrize(
    "fingerprint,request_,sample",
    [
        ("other-model", BASE, 0),
        ("m", BASE, 1),
        ("m", replace(BASE, messages=BASE.messages[:1] + (Message("user", "who!"),)), 0),
        ("m", replace(BASE, messages=(Message("user", "be brief"), BASE.messages[1])), 0),
        ("m", replace(BASE, sampling=replace(BASE.sampling, seed=12)), 0),
        ("m", replace(BASE, sampling=replace(BASE.sampling, temperature=0.8)), 0),
        ("m", replace(BASE, sampling=replace(BASE.sampling, top_p=0.9)), 0),
        ("m", replace(BASE, sampling=replace(BASE.sampling, max_tokens=33)), 0),
        ("m", replace(BASE, sampling=replace(BASE.sampling, stop=("\n",))), 0),
    ],
)
def test_call_id_changes_with_what_changes_the_output(fingerprint, request_, sample):
    assert call_id(fingerprint, request_, sample) != call_id("m", BASE, 0)


def test_call_id_ignores_n_so_more_samples_reuse_the_first():
    more = replace(BASE, sampling=replace(BASE.sampling, n=4))
    assert call_id("m", more, 0) == call_id("m", BASE, 0)


def test_derive_seed_is_stable_and_fits_int64():
    seeds = {derive_seed(run, q, p) for run in (0, 1) for q in ("q1", "q2") for p in ("0", "0/1")}
    assert len(seeds) == 8
    assert all(0 <= s < 2**62 for s in seeds)
    assert derive_seed(3, "q", "0/1") == derive_seed(3, "q", "0/1")


def test_cache_hits_make_zero_engine_calls():
    first_backend, second_backend = ScriptedBackend(), ScriptedBackend()
    first = CallCache("run-1")
    asyncio.run(Batcher(first_backend, first).generate(BASE))
    second = CallCache("run-2", MemoryCallStore(first.rows()))
    batcher = Batcher(second_backend, second)
    [completion] = asyncio.run(batcher.generate(BASE))
    assert second_backend.attempts == 0
    assert completion.cached and completion.text == first.rows()[0]["text"]
    assert [r["run_id"] for r in second.rows()] == ["run-2"]
    assert batcher.stats.as_dict()["hits"] == 1


def test_other_model_fingerprint_misses():
    first = CallCache("run-1")
    asyncio.run(Batcher(ScriptedBackend(fingerprint="a"), first).generate(BASE))
    other = ScriptedBackend(fingerprint="b")
    asyncio.run(Batcher(other, CallCache("run-2", MemoryCallStore(first.rows()))).generate(BASE))
    assert other.calls == 1


def test_fresh_row_records_the_call():
    cache = CallCache("run-1", clock=TickingClock())
    asyncio.run(Batcher(ScriptedBackend(fingerprint="fp"), cache).generate(BASE))
    [row] = cache.rows()
    assert row["call_id"] == call_id("fp", BASE, 0)
    assert row["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "who?"},
    ]
    sampling = {"temperature": 0.7, "top_p": 1.0, "max_tokens": 32, "stop": []}
    assert json.loads(row["sampling"]) == sampling
    assert (row["seed"], row["sample_index"], row["role"]) == (11, 0, "policy")
    assert row["created_at"] == datetime(2025, 1, 1, 0, 0, 1, tzinfo=UTC)


def test_run_id_is_required():
    with pytest.raises(ValueError, match="run_id"):
        CallCache("")


async def shard_build(batcher: Batcher, n_questions: int) -> list[list[str]]:
    """A tiny 3-step strategy with per-node seeds and a 2-sample branch."""

    async def question(q: int) -> list[str]:
        qid, texts = f"q{q}", []
        for step in range(3):
            seed = derive_seed(0, qid, f"{step}")
            request = Request.chat(
                [{"role": "user", "content": f"{qid} step {step}: {texts[-1:]}"}],
                n=2 if step == 1 else 1,
                temperature=0.7,
                seed=seed,
            )
            texts.extend(c.text for c in await batcher.generate(request))
        return texts

    return await batcher.run_all([lambda q=q: question(q) for q in range(n_questions)], 3)


def build_once(warehouse, run_id: str) -> tuple[ScriptedBackend, list, object]:
    backend = ScriptedBackend()
    cache = CallCache.from_warehouse(warehouse, run_id, clock=TickingClock())
    outputs = asyncio.run(shard_build(Batcher(backend, cache), n_questions=5))
    path = cache.write(warehouse, shard="shard-0")
    return backend, outputs, pq.read_table(path)


def test_rebuild_makes_zero_engine_calls_and_identical_tables(warehouse):
    backend1, outputs1, table1 = build_once(warehouse, "run-1")
    backend2, outputs2, table2 = build_once(warehouse, "run-1")
    assert [len(b) for b in backend1.batches] == [3, 3, 3, 2, 2, 2]  # 5 questions, 3 in flight
    assert backend2.attempts == 0
    assert outputs2 == outputs1
    assert table1.num_rows == 5 * 4
    assert table2.equals(table1)


def test_new_run_reuses_calls_of_an_earlier_run(warehouse):
    build_once(warehouse, "run-1")
    backend, _, table = build_once(warehouse, "run-2")
    assert backend.attempts == 0
    assert set(table.column("run_id").to_pylist()) == {"run-2"}
    first = warehouse.read("llm_calls", run_id="run-1")
    # every row is the earlier run's, marked as generated by another run
    assert set(table.column("cached").to_pylist()) == {True} and set(first.column("cached").to_pylist()) == {False}
    assert table.drop_columns(["run_id", "cached"]).equals(first.drop_columns(["run_id", "cached"]))


def test_empty_cache_writes_an_empty_shard(warehouse):
    path = CallCache("run-9").write(warehouse, shard="s")
    assert pq.read_table(path).num_rows == 0


FINGERPRINT = "transformers/smollm2-135m-instruct/float32/0123456789abcdef"
JAWS = Request.chat(
    [{"role": "user", "content": "Who directed Jaws?"}],
    n=2,
    temperature=0.7,
    max_tokens=64,
    stop=("</answer>",),
    seed=11,
)


def test_free_call_ids_are_those_of_releases_before_grammars():
    """Pinned from the release without structured generation: caches built then stay valid."""
    assert call_id(FINGERPRINT, JAWS, 0) == "b522d92fa6bd8e4ffd98e9c6ff4faf5b"
    assert call_id(FINGERPRINT, JAWS, 1) == "4cee4475232cca17ffa04785e3dafa06"


def test_a_grammar_is_part_of_the_call_id():
    from ragfactory.tasks.llm.types import Grammar

    answer = Grammar("a", 'start: "<answer>" x "</answer>"\nx[max_tokens=8]: /[a-z]+/\n', 26)
    other = Grammar("a", 'start: "<answer>" x "</answer>"\nx[max_tokens=9]: /[a-z]+/\n', 27)
    constrained = replace(JAWS, sampling=replace(JAWS.sampling, grammar=answer))
    ids = {
        call_id(FINGERPRINT, r, 0)
        for r in (JAWS, constrained, replace(JAWS, sampling=replace(JAWS.sampling, grammar=other)))
    }
    assert len(ids) == 3  # free, constrained, and constrained by another grammar never share rows
    assert constrained.sampling.key()["grammar"] == {"name": "a", "sha256": answer.digest}
    assert call_id(FINGERPRINT, replace(constrained, sampling=constrained.sampling.free()), 0) == call_id(
        FINGERPRINT, JAWS, 0
    )
