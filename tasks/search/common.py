"""What every strategy's expansion of one question shares (docs/architecture.md, "Core contracts").

- ``question_fields``: the (id, text, golden answers) of a ``questions`` row, checked.
- ``Expansion``: one question's tree with the services that grow it, and the three things every
  strategy derives from them: the seed of a node path, the scores of an answer, and ``n``
  samples of one request (``sample_n``: one request with ``n``, its count checked).
- ``search_batch`` (``retrieve`` for one query) and ``hit_record`` (``hits_from_records`` back): one retriever call for many
  queries off the event loop,
  and a hit as a node keeps it in ``parsed`` (so a state can be rebuilt from rows).

Seeds and request tags are derived here once, so a strategy cannot drift from the ids earlier
builds cached their calls under (tests/search/test_golden_ids.py pins them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from ragfactory.tasks.llm.seeds import derive_seed
from ragfactory.tasks.llm.types import Completion, Generator, Request
from ragfactory.tasks.retrieval.types import Hit, Retriever
from ragfactory.tasks.rewards.answer import METRICS
from ragfactory.tasks.search.tree import QuestionTree

Tags = tuple[tuple[str, str], ...]


def question_fields(question: Mapping) -> tuple[str, str, list[str]]:
    """(question_id, question, golden_answers) of a ``questions`` row, or an error naming the field."""
    for name in ("question_id", "question", "golden_answers"):
        if question.get(name) is None:
            raise ValueError(f"question row {question.get('question_id')!r} has no {name!r}")
    golden = question["golden_answers"]
    golden = [golden] if isinstance(golden, str) else list(golden)
    return str(question["question_id"]), str(question["question"]), golden


def request_tags(question_id: str, path: str) -> Tags:
    """The tags a request carries: which question and which node path it expands."""
    return (("question_id", question_id), ("path", path))


async def sample_n(generator: Generator, request: Request) -> list[Completion]:
    """The ``request.sampling.n`` completions of one request; another count is an error naming
    the node path the request expands."""
    completions = await generator.generate(request)
    n = request.sampling.n
    if len(completions) != n:
        path = dict(request.tags).get("path", "?")
        raise ValueError(f"generator returned {len(completions)} completions for n={n} at {path}")
    return completions


@dataclass
class Expansion:
    """One question's expansion: its tree, golden answers and the services that grow it."""

    tree: QuestionTree
    golden: list[str]
    generator: Generator
    retriever: Retriever
    run_seed: int

    def seed(self, path: str) -> int:
        """The sampling seed of what expands the node at ``path`` (run, question, path)."""
        return derive_seed(self.run_seed, self.tree.question_id, path)

    def scores(self, answer: str | None) -> dict[str, float]:
        """EM, F1 and cover-EM of an answer against the golden answers."""
        return {name: metric(answer, self.golden) for name, metric in METRICS.items()}

    def tags(self, path: str) -> Tags:
        return request_tags(self.tree.question_id, path)

    async def sample(self, request: Request) -> list[Completion]:
        return await sample_n(self.generator, request)


def _search(retriever: Retriever, queries: list[str], k: int) -> list[list[Hit]]:
    """``retriever.search`` for a worker thread; a ``StopIteration`` becomes a ``RuntimeError``
    (asyncio cannot carry it out of the thread: the awaiting question would wait forever)."""
    try:
        return retriever.search(queries, k)
    except StopIteration as exc:
        raise RuntimeError(f"{type(retriever).__name__}.search raised StopIteration") from exc


async def search_batch(retriever: Retriever, queries: list[str], k: int) -> list[list[Hit]]:
    """One retriever call for many queries, off the event loop (an HTTP retriever blocks)."""
    if not queries:
        return []
    results = await asyncio.to_thread(_search, retriever, queries, k)
    if len(results) != len(queries):
        raise ValueError(f"retriever answered {len(results)} result lists for {len(queries)} queries")
    return [list(hits)[:k] for hits in results]


async def retrieve(retriever: Retriever, query: str, k: int) -> list[Hit]:
    """The top ``k`` passages for one query, off the event loop."""
    return (await search_batch(retriever, [query], k))[0]


def hit_record(hit: Hit) -> dict:
    """A hit as kept in a node's ``parsed``, so a state can be rebuilt from rows."""
    return {"passage_id": hit.passage_id, "title": hit.title, "text": hit.text, "score": hit.score}


def hits_from_records(records: list[dict] | None) -> list[Hit]:
    """The hits ``hit_record`` kept in a node's ``parsed`` (none: an empty list)."""
    return [Hit(**record) for record in records or []]
