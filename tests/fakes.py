"""Test doubles shared by the test suite (docs/architecture.md, "Style": fakes, not mocks).

Each fake implements one of the project's protocols with behaviour a test can script and
inspect; add new ones here, one class per protocol role, each with a docstring.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ragfactory.tasks.llm.types import Completion, Request

SCRIPTED = "scripted:engine"  # the engine name flow tests put in their configs


def echo_reply(request: Request, sample_index: int) -> str:
    """The default scripted reply: names the last message, the seed and the sample index."""
    return f"{request.messages[-1].content}|seed={request.sampling.seed}|sample={sample_index}"


class ScriptedBackend:
    """A ``Backend`` whose reply is a function of (request, sample index).

    Records every batch it receives (``batches``) so tests can count engine calls and their
    sizes. ``fail_times`` makes the first calls raise ``RuntimeError`` (to exercise retries);
    ``fail_when`` raises for any batch holding a request it accepts.
    """

    def __init__(
        self,
        reply: Callable[[Request, int], str] = echo_reply,
        fingerprint: str = "scripted-v1",
        fail_times: int = 0,
        fail_when: Callable[[Request], bool] | None = None,
        finish_reason: str = "stop",
    ):
        self.reply = reply
        self.fingerprint = fingerprint
        self.fail_times = fail_times
        self.fail_when = fail_when
        self.finish_reason = finish_reason
        self.batches: list[list[Request]] = []
        self.attempts = 0
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        """Engine calls that returned completions."""
        return len(self.batches)

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        with self._lock:
            self.attempts += 1
            if self.attempts <= self.fail_times:
                raise RuntimeError(f"scripted failure {self.attempts}/{self.fail_times}")
            if self.fail_when is not None and any(self.fail_when(r) for r in requests):
                raise RuntimeError("scripted failure for a request in the batch")
            self.batches.append(list(requests))
        return [[self._complete(request, i) for i in range(request.sampling.n)] for request in requests]

    def _complete(self, request: Request, sample_index: int) -> Completion:
        text = self.reply(request, sample_index)
        return Completion(
            text=text,
            finish_reason=self.finish_reason,
            prompt_tokens=sum(len(m.content.split()) for m in request.messages),
            completion_tokens=len(text.split()),
            latency_s=0.001,
        )


class ContinuousScriptedBackend(ScriptedBackend):
    """A ``ContinuousBackend``: each ``agenerate_batch`` call takes ``delay_s`` on the event loop,
    and calls overlap as a server's requests do. Records the largest number of calls in flight
    at once (``max_overlap``); ``numbered`` appends ``#<call number>`` to every reply, so two
    calls for the same request answer differently."""

    continuous = True

    def __init__(
        self, reply: Callable[[Request, int], str] = echo_reply, delay_s: float = 0.05, numbered: bool = False, **kwargs
    ):
        super().__init__(reply, **kwargs)
        self.delay_s = delay_s
        self.numbered = numbered
        self.in_flight = 0
        self.max_overlap = 0

    async def agenerate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        import asyncio

        self.in_flight += 1
        self.max_overlap = max(self.max_overlap, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            answers = self.generate_batch(requests)
        finally:
            self.in_flight -= 1
        if self.numbered:
            number = len(self.batches)
            answers = [
                [
                    Completion(
                        text=f"{c.text}#{number}",
                        finish_reason=c.finish_reason,
                        prompt_tokens=c.prompt_tokens,
                        completion_tokens=c.completion_tokens,
                        latency_s=c.latency_s,
                    )
                    for c in row
                ]
                for row in answers
            ]
        return answers


class GatedBackend(ScriptedBackend):
    """A static engine whose first call holds until the test opens ``gate``, so a test can queue
    requests behind a running step; ``entered`` is set once that first call has started.
    ``count_tokens`` counts a request's words (the tokenizer a scheduler asks, when there is one)."""

    def __init__(self, reply: Callable[[Request, int], str] = echo_reply, **kwargs):
        super().__init__(reply, **kwargs)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def count_tokens(self, request: Request) -> int:
        return sum(len(m.content.split()) for m in request.messages)

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        if not self.entered.is_set():
            self.entered.set()
            if not self.gate.wait(timeout=20):
                raise RuntimeError("GatedBackend: the gate was never opened")
        return super().generate_batch(requests)


@contextmanager
def registered_engine(backend, name: str = SCRIPTED) -> Iterator[str]:
    """Register a test double as the engine ``name`` for the block; yields the name to configure.

    ``backend`` is a ``Backend`` (every role naming ``name`` gets this object, so its ``batches``
    count every engine call) or a factory ``(role config, cache_dir) -> Backend``, for a test
    that picks a double by the role's model. Registered ``shared=False``: each batcher gets the
    double as it is, with no process-wide coalescing or retries in between. Only this process
    sees it (``tasks/llm/registry.py``): a flow run by a worker subprocess cannot use it.
    """
    from ragfactory.tasks.llm.registry import register_backend, unregister_backend

    factory = backend if not hasattr(backend, "generate_batch") else (lambda role, cache_dir: backend)
    register_backend(name, factory, shared=False)
    try:
        yield name
    finally:
        unregister_backend(name)


def scripted_llm(policy: str = SCRIPTED, judge: str | None = None, **fields) -> dict:
    """An ``llm`` config section whose roles name registered engines (the judge: the policy's)."""
    section = {"policy": {"backend": policy}, **fields}
    if judge is not None:
        section["judge"] = {"backend": judge}
    return section


class FixedRetriever:
    """A ``Retriever`` answering each query from a fixed table (query -> hits), best first.

    Unknown queries get ``default`` (no hits unless given). Records every batch of queries it
    receives (``batches``) so tests can count retrieval calls and what they asked.
    """

    def __init__(self, table: dict | None = None, default: list | None = None):
        self.table = dict(table or {})
        self.default = list(default or [])
        self.batches: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list]:
        self.batches.append(list(queries))
        return [list(self.table.get(query, self.default))[:k] for query in queries]


class FunctionRetriever:
    """A ``Retriever`` whose hits for a query are ``hits(query, k)``, for queries no table lists.

    Records every batch of queries it receives (``batches``).
    """

    def __init__(self, hits: Callable[[str, int], list]):
        self.hits = hits
        self.batches: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list]:
        self.batches.append(list(queries))
        return [list(self.hits(query, k))[:k] for query in queries]


class TableEmbedder:
    """An ``Embedder`` whose vectors are given per text, so tests set cosine similarities exactly.

    ``table`` maps a text to a vector (normalised here). Any other text gets a one-hot vector of
    its own in extra dimensions, orthogonal to every given vector and to every other unknown
    text. Records each batch it embeds (``batches``) so tests can see what a cache asked for.
    """

    def __init__(self, table: dict[str, list[float]] | None = None, extra_dims: int = 64):
        import numpy as np

        table = table or {}
        self.table = {text: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for text, v in table.items()}
        self.width = max((len(v) for v in self.table.values()), default=0)
        self.dim = self.width + extra_dims
        self.name = "table-embedder"
        self.unknown: dict[str, int] = {}
        self.batches: list[list[str]] = []

    def embed_queries(self, texts: list[str]):
        import numpy as np

        self.batches.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            if text in self.table:
                out[row, : len(self.table[text])] = self.table[text]
            else:
                slot = self.unknown.setdefault(text, len(self.unknown))
                if self.width + slot >= self.dim:
                    raise ValueError(f"TableEmbedder: more than {self.dim - self.width} unknown texts")
                out[row, self.width + slot] = 1.0
        return out

    def embed_passages(self, texts: list[str]):
        return self.embed_queries(texts)


class TokenScriptedBackend(ScriptedBackend):
    """A ``ScriptedBackend`` that reports token ids and log-probs as an engine does: a character is
    a token (its code point); the prompt is ``<role>content`` per message then ``<assistant>``, so
    a prompt extends the one before it as a chat template's does; a completion's ids are its
    text's then ``EOS``, and sampled token i has log-probability ``-(i + 1) / 64``."""

    EOS = 0

    @staticmethod
    def ids(text: str) -> tuple[int, ...]:
        return tuple(ord(c) for c in text)

    def _complete(self, request: Request, sample_index: int) -> Completion:
        from dataclasses import replace

        plain = super()._complete(request, sample_index)
        prompt = "".join(f"<{m.role}>{m.content}" for m in request.messages) + "<assistant>"
        sampled = self.ids(plain.text) + (self.EOS,)
        return replace(
            plain,
            prompt_token_ids=self.ids(prompt),
            completion_token_ids=sampled,
            completion_logprobs=tuple(-(i + 1) / 64 for i in range(len(sampled))),
            tokenizer_fingerprint="chars-v1",
        )


class DirectGenerator:
    """A backend behind the ``Generator`` contract without an engine: one request, one call (for
    a mode's loop driven by a deterministic backend such as a world teacher)."""

    def __init__(self, backend):
        self.backend = backend

    async def generate(self, request: Request) -> list:
        return self.backend.generate_batch([request])[0]


def world_test_outcomes(answer, backend, retriever, config, folder) -> list[tuple[dict, object]]:
    """(row, outcome) of every test question of the world in ``folder``, answered by the mode
    function ``answer`` with ``backend`` (a world teacher) behind a ``DirectGenerator``."""
    import asyncio

    from ragfactory.tasks.eval.inference import EvalQuestion

    rows = world_rows(folder, "test")

    async def run_all():
        questions = [EvalQuestion(f"world:{r['id']}", r["question"], (r["answer"],)) for r in rows]
        return await asyncio.gather(*(answer(q, DirectGenerator(backend), retriever, config) for q in questions))

    return list(zip(rows, asyncio.run(run_all())))


def step_mode_on_world(answer, teacher, retriever, folder, config) -> None:
    """Check a step mode (``step_loop``'s, ``tasks/eval/inference.py``) with a world teacher behind
    it: every test question answered right, one search a hop then the answering step; a chain cut
    at two steps ends after its two searches with no prediction."""
    import asyncio

    from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig

    done = world_test_outcomes(answer, teacher, retriever, config, folder)
    assert [o.prediction for _, o in done] == [r["answer"] for r, _ in done]
    assert [o.n_retrievals for _, o in done] == [len(r["question_decomposition"]) for r, _ in done]
    assert all(o.n_steps == o.n_retrievals + 1 and not o.errors for _, o in done)
    row = next(r for r in world_rows(folder, "test") if r["rung"] == "chain")
    question = EvalQuestion("world:x", row["question"], (row["answer"],))
    outcome = asyncio.run(answer(question, DirectGenerator(teacher), retriever, InferenceConfig(max_rounds=2)))
    assert (outcome.prediction, outcome.errors, outcome.n_retrievals) == ("", ["no final answer in 2 steps"], 2)


def world_rows(folder, split: str) -> list[dict]:
    """The question rows of one split file of the world in ``folder``."""
    import json

    return [json.loads(line) for line in (folder / f"{split}.jsonl").read_text().splitlines()]


def small_world(folder):
    """A world of 60 questions over 600 passages written to ``folder``, and a BM25 retriever of
    its corpus: what the teacher tests read."""
    import pyarrow as pa

    from ragfactory.tasks.data.corpus import load_corpus
    from ragfactory.tasks.data.world import WorldSpec, generate
    from ragfactory.tasks.retrieval.bm25 import BM25Retriever

    generate(WorldSpec(seed=0, questions=60, passages=600), folder)
    return BM25Retriever.build(pa.Table.from_pylist(load_corpus(folder / "corpus.jsonl", "world").passages))


def teacher_world(tmp_path_factory, teacher_type) -> tuple:
    """(folder, teacher, retriever): a ``small_world`` and a world teacher engine over it, what a
    teacher test module shares."""
    out = tmp_path_factory.mktemp("world")
    retriever = small_world(out)
    return out, teacher_type(out), retriever
