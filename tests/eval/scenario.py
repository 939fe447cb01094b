"""A scripted model and retriever for evaluation tests: two questions whose answers need a search.

The policy reads which prompt it got from the system message and behaves like an engine that
honours the stop strings: tagged outputs end with the tag open (the closing tag was the stop).

- Reasoning, no thoughts yet: "So the next query is <query><topic> director"
- Grounding: "Based on the query, the relevant evidence is <evidence><first document's text>"
  (``<evidence>None`` without documents)
- Reasoning after evidence: "So the answer is <answer><the name in the evidence>"
- direct: "I think it is Nobody"; rag: the first document's name ("Spielberg" for Jaws).

The retriever answers a query naming a film with that film's passage, anything else with nothing.
"""

from __future__ import annotations

import re

from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig
from ragfactory.tasks.llm.types import Request
from ragfactory.tasks.retrieval.types import Hit
from tests.fakes import FunctionRetriever

QUESTIONS = [
    EvalQuestion("q-jaws", "Who directed Jaws?", ("Steven Spielberg",)),
    EvalQuestion("q-alien", "Who directed Alien?", ("Ridley Scott",)),
]
DIRECTORS = {"Jaws": "Steven Spielberg", "Alien": "Ridley Scott"}
CONFIG = InferenceConfig(max_rounds=5, top_k=2, max_tokens=64)


def topic(text: str) -> str:
    return next(name for name in DIRECTORS if name in text)


def hits(query: str, k: int) -> list[Hit]:
    return [
        Hit(f"p-{name}", name, f"{name} was directed by {director}.", 1.0)
        for name, director in DIRECTORS.items()
        if name in query
    ]


def retriever() -> FunctionRetriever:
    return FunctionRetriever(hits)


def policy(request: Request, sample: int) -> str:
    system, user = request.messages[0].content, request.messages[-1].content
    if "extract relevant evidence" in system:
        found = re.search(r"Wikipedia Title: \w+\n(.+?)</reference>", user, re.DOTALL)
        return (
            f"Based on the query, the relevant evidence is <evidence>{found.group(1).strip()}"
            if found
            else "<evidence>None"
        )
    if "question-answering assistant" in system:
        if "<evidence>" not in user:
            return f"I need the director. So the next query is <query>{topic(user)} director"
        name = re.search(r"directed by ([A-Z]\w+ [A-Z]\w+)", user).group(1)
        return f"The evidence names the director. So the answer is <answer>{name}"
    if "your own knowledge" in system:
        return "I think it is Nobody"
    if "given document" in system:
        return re.search(r"directed by [A-Z]\w+ ([A-Z]\w+)", system).group(1) if "directed by" in system else ""
    raise AssertionError(f"unexpected prompt: {system[:80]!r}")
