"""R3-RAG's judges on the ``judge`` role: answer correctness (Eq. 2) and document relevance (Eq. 3).

The paper does not print either instruction; ``prompts/r3_outcome_judge.txt`` and
``prompts/r3_relevance_judge.txt`` are ours. Both end in one verdict line, which their grammars
hold the judge to; a verdict that does not read (a judge generating freely) is a format error of
that reward and scores 0 (relevance) or "not correct" (outcome), and the question goes on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragfactory.tasks.llm.types import Message, Request, Sampling
from ragfactory.tasks.prompts.loader import load_grammar, render_prompt
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.r3.steps import documents_text

_RELEVANCE = re.compile(r"So the relevance is\s*\[?\s*([0-9]+(?:\.[0-9]+)?)")
_OUTCOME = re.compile(r"So the predicted answer is correct:\s*\[?\s*(yes|no)\b", re.IGNORECASE)


def parse_relevance(text: str | None) -> float | None:
    """The score in [0, 1] of "So the relevance is X" (the last such line); None if none reads.

    >>> parse_relevance("So the relevance is 0.7"), parse_relevance("So the relevance is 7")
    (0.7, None)
    """
    found = _RELEVANCE.findall(text or "")
    if not found:
        return None
    score = float(found[-1])
    return score if 0.0 <= score <= 1.0 else None


def parse_outcome(text: str | None) -> bool | None:
    """True / False of "So the predicted answer is correct: yes / no"; None if none reads.

    >>> parse_outcome("So the predicted answer is correct: yes"), parse_outcome("maybe")
    (True, None)
    """
    found = _OUTCOME.findall(text or "")
    return found[-1].lower() == "yes" if found else None


def judge_request(prompt: str, values: dict[str, str], max_tokens: int, seed: int, tags) -> Request:
    """A greedy verdict request on the ``judge`` role, held to the prompt's grammar."""
    grammar = load_grammar(prompt, max_tokens, "R3Config.judge_max_tokens")
    sampling = Sampling(temperature=0.0, max_tokens=max_tokens, seed=seed, grammar=grammar)
    return Request((Message("user", render_prompt(prompt, **values)),), sampling, "judge", tags)


def relevance_values(question: str, docs: Sequence[Hit], doc_chars: int) -> dict[str, str]:
    return {"question": question, "documents": documents_text(docs, doc_chars)}


def outcome_values(question: str, golden: Sequence[str], answer: str) -> dict[str, str]:
    return {"question": question, "golden": "; ".join(golden), "answer": answer}
