"""The MCTS scenario ``test_mcts.py`` works by hand (its docstring): one question, a scripted
policy, a retriever that always finds the Jaws passage; exporters' tests search it too."""

from __future__ import annotations

import asyncio

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.mcts.config import MctsConfig
from ragfactory.tasks.search.mcts.expansion import search_question
from ragfactory.tasks.search.strategy import ShardContext
from tests.fakes import FunctionRetriever

QUESTION = {"question_id": "q-jaws", "question": "Who directed Jaws?", "golden_answers": ["Steven Spielberg"]}
CONFIG = MctsConfig(iterations=6, child_limit=2, max_depth=3, c=1.0, alpha=0.9, rollouts=1)


def policy(request, sample: int) -> str:
    system, user = request.messages[0].content, request.messages[1].content
    path = dict(request.tags)["path"]
    if "extract relevant evidence" in system:
        return "Based on the query, the relevant evidence is <evidence>Jaws was directed by Steven Spielberg."
    if "Previous Thoughts" not in user:
        return "So the next query is <query>Jaws director" if path.endswith("s0") else "So the answer is <answer>Bob"
    return "So the answer is <answer>Steven Spielberg"


def search_jaws(backend):
    retriever = FunctionRetriever(lambda q, k: [Hit("p-jaws", "Jaws", "Jaws was directed by Steven Spielberg.", 1.0)])
    context = ShardContext(Batcher(backend), retriever, "run-1", 0)
    return asyncio.run(search_question(QUESTION, context, CONFIG))
