"""Rollouts of one branch (DecEx-RAG, Table 8): lockstep turns, batched searches, turn limit."""

from __future__ import annotations

import asyncio
import zlib

import pytest

from ragfactory.tasks.llm.types import Completion, Request
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.decex.rollout import RolloutSpec, run_rollouts
from tests.fakes import FixedRetriever

SPEC = RolloutSpec(n=3, max_turns=3, top_k=2, temperature=0.7, max_tokens=64, role="policy")
HITS = [Hit("p1", "A", "alpha", 2.0), Hit("p2", "B", "beta", 1.0), Hit("p3", "C", "gamma", 0.5)]


class TurnGenerator:
    """Sample 0 answers at once; sample 1 searches once (its engine drops the stop string)
    then answers; sample 2 searches forever. Records every request."""

    def __init__(self):
        self.requests: list[Request] = []

    async def generate(self, request: Request) -> list[Completion]:
        self.requests.append(request)
        if len(request.messages) == 1:
            texts = ["<answer> x </answer>", "Need facts. <search> q1", "<search> loop </search>"]
            return [Completion(t, call_id=f"c{len(self.requests)}-{i}") for i, t in enumerate(texts)]
        last = request.messages[-2].content
        text = "<search> loop </search>" if "loop" in last else "So <answer> y </answer>"
        return [Completion(text, call_id=f"c{len(self.requests)}")]


def seed_of(suffix: str) -> int:
    return zlib.crc32(suffix.encode())


@pytest.fixture
def rolled():
    generator, retriever = TurnGenerator(), FixedRetriever(default=HITS)
    results = asyncio.run(run_rollouts("PROMPT", SPEC, generator, retriever, seed_of=seed_of))
    return results, generator, retriever


def test_each_rollout_ends_its_own_way(rolled):
    results, _, _ = rolled
    assert [(r.final_answer, r.n_turns, r.truncated, r.error) for r in results] == [
        ("x", 1, False, None),
        ("y", 2, False, None),
        (None, 3, True, None),
    ]
    assert results[1].turns[0] == "Need facts. <search> q1 </search>"  # closing tag restored
    assert results[1].turns[1] == '<information>\nDoc 1: "A"\nalpha\nDoc 2: "B"\nbeta\n</information>'
    assert results[1].passage_ids == ["p1", "p2"] and results[2].passage_ids == ["p1", "p2"] * 2


def test_turns_run_in_lockstep_with_one_search_batch_per_turn(rolled):
    _, generator, retriever = rolled
    assert [r.sampling.n for r in generator.requests] == [3, 1, 1, 1]
    assert retriever.batches == [["q1", "loop"], ["loop"]]
    first, *later = generator.requests
    assert first.sampling.stop == ("</search>", "</answer>")
    assert len({r.sampling.seed for r in generator.requests}) == 4
    assert [m.role for m in later[-1].messages] == ["user", "assistant", "user", "assistant", "user"]


def test_a_malformed_turn_ends_only_its_rollout():
    class Mixed(TurnGenerator):
        async def generate(self, request):
            return [Completion(t) for t in ["", "no tags", "<answer> z </answer>"]]

    results = asyncio.run(run_rollouts("P", SPEC, Mixed(), FixedRetriever(), seed_of=lambda s: 1))
    assert [(r.final_answer, r.error) for r in results] == [
        (None, "empty output"),
        (None, "missing <search> or <answer>"),
        ("z", None),
    ]
