"""R3-RAG's hand-worked Jaws question (``tests/search/r3/test_r3.py`` works it through): the scripted
policy and judges, the retriever and the config, shared by the scripted and the embedded-model tests."""

from __future__ import annotations

import asyncio

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.r3.config import R3Config
from ragfactory.tasks.search.r3.expansion import r3_question
from ragfactory.tasks.search.strategy import ShardContext
from tests.fakes import FunctionRetriever, ScriptedBackend

QUESTION = {"question_id": "q-jaws", "question": "Who directed Jaws?", "golden_answers": ["Steven Spielberg"]}
CONFIG = R3Config(n_attempts=3, top_k=1, temperatures=(0.0, 0.7))
CAST = Hit("p-cast", "Jaws cast", "Jaws stars Roy Scheider.", 1.0)
DIRECTOR = Hit("p-director", "Jaws", "Jaws was directed by Steven Spielberg.", 1.0)
QUERIES = {
    "q/a0": "Jaws cast",
    "q/a1": "Jaws cast",
    "q/a1/s2": "Jaws cast",
    "q/a2": "Jaws director",
}
ANSWERS = {"q/a0/s2": "Bob", "q/a1/s2/s3": "Steven Spielberg", "q/a2/s2": "Steven Spielberg"}


def retrieve(query: str, k: int) -> list[Hit]:
    return ([CAST, DIRECTOR] if query == "Jaws cast" else [DIRECTOR, CAST])[:k]


def analysis(path: str) -> str:
    return f"Step {path.count('/')} of {path.split('/')[1]}."


def policy(request, sample: int) -> str:
    path, prompt = dict(request.tags)["path"], request.messages[-1].content
    if path.endswith("/r"):
        return "So the relevance is " + ("0.8" if "directed by Steven Spielberg" in prompt else "0.3")
    if path.endswith("/o"):
        return "So the predicted answer is correct: no"
    if path in QUERIES:
        return f"The problem analysis: {analysis(path)}\nThe retrieval query: {QUERIES[path]}"
    return f"The problem analysis: {analysis(path)}\nThe final answer: {ANSWERS[path]}"


def run(reply=policy, config: R3Config = CONFIG):
    backend = ScriptedBackend(reply)
    context = ShardContext(Batcher(backend), FunctionRetriever(retrieve), "run-1", 0)
    tree, rewards = asyncio.run(r3_question(QUESTION, context, config))
    return backend, tree, rewards
