"""The world's relations: what each states, the sentences that say it, and a reader that finds it.

Six typed relations link four kinds of entity. Every fact is written in the subject's passage,
in one of several sentence forms drawn per fact, so a model has to read rather than match one
pattern; ``read_fact`` inverts those forms (a regular expression per form), which is how the
oracle of ``tasks/eval/oracle.py`` answers a question through the retriever and how a test knows
every question is answerable from the corpus alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Relation:
    """A typed relation: ``subject`` kind -> ``object`` kind ("year" for a number)."""

    name: str
    subject: str
    object: str
    question: str  # the one-hop question, "{s}" the subject
    ref_question: str  # the same with the subject a reference to an earlier answer, "{s}" = "#1"
    sentences: tuple[str, ...]  # "{s}" the subject, "{o}" the object


RELATIONS = {
    r.name: r
    for r in (
        Relation(
            "born_in",
            "person",
            "city",
            "In which city was {s} born?",
            "In which city was {s} born?",
            (
                "{s} was born in {o}.",
                "{s}'s birthplace is {o}.",
                "{s} is a native of {o}.",
                "Born in {o}, {s} moved away young.",
            ),
        ),
        Relation(
            "works_for",
            "person",
            "company",
            "Which company does {s} work for?",
            "Which company does {s} work for?",
            (
                "{s} works for {o}.",
                "{s} is an employee of {o}.",
                "{s} took a job at {o} and stayed.",
                "At {o}, {s} leads a small team.",
            ),
        ),
        Relation(
            "born_year",
            "person",
            "year",
            "In what year was {s} born?",
            "In what year was {s} born?",
            (
                "{s} was born in the year {o}.",
                "{s}'s year of birth is {o}.",
                "In {o}, {s} was born.",
            ),
        ),
        Relation(
            "headquartered_in",
            "company",
            "city",
            "In which city is {s} headquartered?",
            "In which city is {s} headquartered?",
            (
                "{s} is headquartered in {o}.",
                "The headquarters of {s} are in {o}.",
                "{s} has its head office in {o}.",
            ),
        ),
        Relation(
            "founded_year",
            "company",
            "year",
            "In what year was {s} founded?",
            "In what year was {s} founded?",
            (
                "{s} was founded in {o}.",
                "{s} was established in the year {o}.",
                "Founded in {o}, {s} grew quickly.",
            ),
        ),
        Relation(
            "located_in",
            "city",
            "country",
            "In which country is {s}?",
            "In which country is {s} located?",
            (
                "{s} is a city in {o}.",
                "The city of {s} lies in {o}.",
                "{s} is located in {o}.",
            ),
        ),
    )
}

# Relations by subject kind, in a fixed order (a seed draws the same facts on every machine).
BY_SUBJECT = {kind: [r for r in RELATIONS.values() if r.subject == kind] for kind in ("person", "company", "city")}

# Sentences that state no relation: texture, so passages are not lists of facts.
FILLERS = {
    "person": ("{s} enjoys long walks.", "{s} is fond of old maps.", "Friends describe {s} as patient."),
    "company": ("{s} employs several hundred people.", "{s} is known for careful work."),
    "city": ("{s} has a busy market square.", "{s} is known for its bridges.", "{s} sits beside a river."),
    "country": ("{s} is a country with long winters.", "{s} is known for its mountains.", "{s} is a small country."),
}

# Sentences that name another object of a fact's kind in no relation a question asks about
# (``WorldSpec.mentions``): a person's passage then names two cities, two years and two companies,
# so the kind of the answer alone does not pick it out of the passage; reading the relation does.
MENTIONS = {
    "city": ("{s} has ties to {o}.", "{s} is well known in {o}."),
    "company": ("{s} once did business with {o}.", "{s} has ties to {o}."),
    "country": ("{s} has ties to {o}.", "{s} is well known in {o}."),
    "year": ("{s} made the news in {o}.", "{s} was in the papers in {o}."),
}

_NAME = r"[A-Z][a-z]+(?: [A-Z][a-z]+)*"
_YEAR = r"\d{4}"


def _pattern(sentence: str, subject: str, kind: str) -> re.Pattern:
    obj = _YEAR if kind == "year" else _NAME
    head, _, tail = re.escape(sentence).partition(re.escape("{o}"))
    head = head.replace(re.escape("{s}"), re.escape(subject))
    tail = tail.replace(re.escape("{s}"), re.escape(subject))
    return re.compile(f"(?:^|(?<=[ .])){head}(?P<o>{obj}){tail}")


def read_fact(text: str, subject: str, relation: str) -> str | None:
    """The object ``text`` states for (``subject``, ``relation``) in any of its sentence forms,
    or None.

    >>> read_fact("Tharo Vekin is a native of Drelmere. Tharo Vekin enjoys long walks.", "Tharo Vekin", "born_in")
    'Drelmere'
    """
    match = find_fact(text, subject, relation)
    return None if match is None else match.group("o")


def find_fact(text: str, subject: str, relation: str) -> re.Match | None:
    """The sentence of ``text`` that states (``subject``, ``relation``) (its object the match's
    group ``o``), or None."""
    spec = RELATIONS[relation]
    for sentence in spec.sentences:
        if (match := _pattern(sentence, subject, spec.object).search(text)) is not None:
            return match
    return None
