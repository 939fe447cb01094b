"""Scripted TreePS-RAG expansions shared by the tree and export tests.

The policy reads the parent's path from the request tags and the sample index; the retriever
turns a query into passage ids, so each test decides which children retrieve the same passages.
``build`` values the trees as the build's valuation stage does (``valued=False``: as the search
leaves them).
"""

from __future__ import annotations

import asyncio

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.types import Request
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.treeps.expansion import TreePSConfig, expand_question
from ragfactory.tasks.valuation.node_values import assign_node_values
from tests.fakes import FunctionRetriever, ScriptedBackend

QUESTIONS = [
    {"question_id": f"q{i}", "question": f"Capital of country {i}?", "golden_answers": ["Paris"]} for i in range(2)
]


def path_of(request: Request) -> str:
    return dict(request.tags)["path"]


def distinct_search(request: Request, sample: int) -> str:
    """Every child searches, each with its own query (no closing tag: the stop string ate it)."""
    return f"<reason>Need more.</reason> <search> {path_of(request)}|{sample} "


def mixed(request: Request, sample: int) -> str:
    """By sample index: right answer, wrong answer, search, malformed."""
    return [
        "<reason>Known.</reason> <answer> Paris </answer>",
        "<answer> Lyon </answer>",
        f"<reason>Look it up.</reason> <search> {path_of(request)}|{sample} </search>",
        "I am not sure what to do.",
    ][sample % 4]


def own_passages(query: str, k: int) -> list[Hit]:
    return [Hit(f"{query}#{i}", "T", f"text {i}", 1.0) for i in range(k)]


def two_groups(query: str, k: int) -> list[Hit]:
    """Even samples retrieve one passage set, odd samples another, per parent."""
    parent, _, sample = query.partition("|")
    group = f"{parent}:{int(sample) % 2}"
    return [Hit(f"{group}#{i}", "T", "text", 1.0) for i in range(k)]


def build(reply, hits=own_passages, config=TreePSConfig(), questions=QUESTIONS, run_seed=0, valued=True):
    backend = ScriptedBackend(reply)
    batcher = Batcher(backend)
    retriever = FunctionRetriever(hits)

    async def run():
        jobs = [expand_question(q, batcher, retriever, config, "run", run_seed) for q in questions]
        return await batcher.run_all(jobs, max_in_flight=len(questions))

    trees = asyncio.run(run())
    for tree in trees if valued else ():
        assign_node_values(tree.nodes)
    return trees, backend, retriever
