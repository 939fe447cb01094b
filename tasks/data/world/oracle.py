"""An oracle that answers a world question by following its gold decomposition through a retriever.

It is the world's ceiling and its proof of answerability: for each step it sends the step's
question (``#n`` replaced by its own earlier answer) to the retriever, and reads the fact asked
from the first hit about an entity the step names (the passage titled with that name: a world
entity's facts are stated in its own passage). It never sees a gold answer. A question it answers
exactly is answerable from the corpus by search and reading alone, at that ``top_k``.

The retriever is anything with ``search(queries, k) -> [[hit, ...], ...]`` whose hits carry
``title`` and ``text`` (``tasks/retrieval/types.py``'s ``Retriever``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ragfactory.tasks.data.world.facts import find_fact

REFERENCE = re.compile(r"#(\d+)")


@dataclass
class OracleAnswer:
    answer: str | None  # None: a step found nothing to read
    step_answers: list[str | None] = field(default_factory=list)
    searches: int = 0


def _read_step(retriever: Any, question: str, relation: str, top_k: int) -> str | None:
    [hits] = retriever.search([question], top_k)
    return read_hits(hits, question, relation)


def read_hits(hits: list, question: str, relation: str) -> str | None:
    """The ``relation`` fact of the first hit about an entity ``question`` names, or None."""
    match = find_in_hits(hits, question, relation)
    return None if match is None else match.group("o")


def find_in_hits(hits: list, question: str, relation: str) -> re.Match | None:
    """The sentence stating the ``relation`` fact in the first hit about an entity ``question``
    names (its object the match's group ``o``), or None."""
    for hit in hits:
        if hit.title and hit.title in question:
            if (match := find_fact(hit.text, hit.title, relation)) is not None:
                return match
    return None


def oracle_answer(retriever: Any, steps: list[str], relations: list[str], rung: str, top_k: int = 3) -> OracleAnswer:
    """Answer from the decomposition ``steps`` (``#n`` the n-th answer) and each step's relation;
    a comparison answers with the subject whose year comes first."""
    result = OracleAnswer(None)
    for step, relation in zip(steps, relations):
        question = resolve(step, result.step_answers)
        result.searches += 1
        result.step_answers.append(_read_step(retriever, question, relation, top_k))
        if result.step_answers[-1] is None:
            return result
    result.answer = final_answer(rung, steps, result.step_answers)
    return result


def final_answer(rung: str, steps: list[str], step_answers: list[str]) -> str:
    """The question's answer from its steps' answers: the last one, or for a comparison the
    subject whose year comes first."""
    if rung != "comparison":
        return step_answers[-1]
    years = [int(a) for a in step_answers]
    return subject_of(steps[years.index(min(years))])


def resolve(step: str, answers: list[str | None]) -> str:
    """``step`` with each ``#n`` replaced by the n-th answer (kept as ``#n`` when there is none)."""
    return REFERENCE.sub(lambda m: answers[int(m.group(1)) - 1] or m.group(0), step)


def subject_of(step: str) -> str:
    """The entity a one-hop world question names: its run of capitalised words after the
    question's first word ("In what year was Tharo Vekin born?" -> "Tharo Vekin")."""
    words = re.findall(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*", step.split(" ", 1)[1])
    return words[0] if words else ""
