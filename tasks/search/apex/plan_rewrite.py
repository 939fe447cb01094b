"""Gold plans as natural-language sub-questions (APEX-Searcher, Appendix C.1).

MuSiQue writes some decomposition steps as Wikidata-style triples, ``Oh Yeah >> performer`` or
``#2 >> located in the administrative territorial entity``. A planner never writes that form, so
before SEPR compares plans (§2.2.1) APEX-Searcher had DeepSeek-V3 "rewrite the original planning
of symbolic language for task decomposition into natural language". Here the default rewrite is
deterministic: one question template per relation (the relations of MuSiQue's answerable set),
worded as a planner words them (Wikidata's "administrative territorial entity" becomes "county,
city or region"), and "What is the <relation> of <subject>?" for any other. The LLM rewrite is
the option closer to the paper (``rewrite_steps_with_llm``); it falls back to the template
whenever the model's question is empty or loses a ``#n`` reference, so a rewrite never changes a
plan's dependencies.

Steps already in natural language pass through unchanged; the original text is kept beside the
rewrite (``plans.steps.original``), and SEPR scores against the rewrite.

>>> rewrite_step("Oh Yeah >> performer")
'Who is the performer of Oh Yeah?'
>>> rewrite_step("#2 >> located in the administrative territorial entity")
'In which county, city or region is #2 located?'
>>> rewrite_step("Oh Yeah >> tempo marking")
'What is the tempo marking of Oh Yeah?'
>>> rewrite_step("When was #1 signed by Barcelona?")
'When was #1 signed by Barcelona?'
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from types import MappingProxyType

from ragfactory.tasks.llm.types import Generator, Message, Request, Sampling
from ragfactory.tasks.prompts.loader import load_grammar, render_prompt
from ragfactory.tasks.search.common import sample_n
from ragfactory.tasks.search.parsing import find_tag

_SYMBOLIC = re.compile(r"^(?P<subject>.+?)\s*>>\s*(?P<relation>[^>]+)$")
REFERENCE = re.compile(r"#(\d+)")
GENERIC_TEMPLATE = "What is the {relation} of {s}?"
_WHO = (
    "author",
    "composer",
    "performer",
    "producer",
    "creator",
    "developer",
    "screenwriter",
    "director",
    "spouse",
    "father",
    "mother",
    "child",
    "sibling",
    "cast member",
    "employer",
    "founded by",
    "operator",
    "manufacturer",
)
RELATION_TEMPLATES = MappingProxyType(
    {
        **{relation: f"Who is the {relation} of {{s}}?" for relation in _WHO},
        "located in the administrative territorial entity": "In which county, city or region is {s} located?",
        "contains administrative territorial entity": "Which county, city or region does {s} contain?",
        "shares border with": "What borders {s}?",
        "place of birth": "Where was {s} born?",
        "place of death": "Where did {s} die?",
        "country": "Which country is {s} in?",
        "country of citizenship": "What is the country of citizenship of {s}?",
        "capital": "What is the capital of {s}?",
        "capital of": "What is {s} the capital of?",
        "member of sports team": "Which sports team is {s} a member of?",
        "member of": "What is {s} a member of?",
        "member of political party": "Which political party is {s} a member of?",
        "owned by": "Who owns {s}?",
        "headquarters location": "Where is the headquarters of {s}?",
        "educated at": "Which school or university did {s} attend?",
        "work location": "Where did {s} work?",
        "record label": "What is the record label of {s}?",
        "named after": "What is {s} named after?",
        "part of": "What is {s} part of?",
        "religion": "What is the religion of {s}?",
        "location": "Where is {s} located?",
        "location of formation": "Where was {s} formed?",
        "position held": "What position did {s} hold?",
        "platform": "On which platform is {s} available?",
        "located in or next to body of water": "Which body of water is {s} located in or next to?",
        "followed by": "What followed {s}?",
        "occupant": "Who occupies {s}?",
        "drafted by": "Which team drafted {s}?",
        "crosses": "What does {s} cross?",
        "conflict": "Which conflict did {s} take part in?",
        "participant in": "Which event did {s} participate in?",
    }
)


def references(text: str) -> list[int]:
    """The distinct ``#n`` step numbers a sub-question refers to, ascending.

    >>> references("Who won more titles, #3 or #2 or #3?")
    [2, 3]
    """
    return sorted({int(n) for n in REFERENCE.findall(text)})


def is_symbolic(text: str) -> bool:
    return _SYMBOLIC.match(text.strip()) is not None


def rewrite_step(text: str) -> str:
    """The natural-language question of a step: a template for ``subject >> relation``."""
    text = " ".join(text.split())
    match = _SYMBOLIC.match(text)
    if match is None:
        return text
    subject, relation = match["subject"].strip(), match["relation"].strip()
    template = RELATION_TEMPLATES.get(relation.lower(), GENERIC_TEMPLATE)
    return template.format(s=subject, relation=relation)


def rewrite_steps(originals: Sequence[str]) -> list[str]:
    return [rewrite_step(text) for text in originals]


def accept_llm_rewrite(original: str, output: str | None) -> str:
    """The model's question when it is usable, else the template rewrite of ``original``.

    Usable: non-empty, a single line, and referring to exactly the steps the original does.

    >>> accept_llm_rewrite("#1 >> spouse", "<question>Who was #1 married to?</question>")
    'Who was #1 married to?'
    >>> accept_llm_rewrite("#1 >> spouse", "<question>Who was Diana married to?</question>")
    'Who is the spouse of #1?'
    """
    question = find_tag(output, "question")
    if question is None:
        question = (output or "").strip()
    question = " ".join(question.split())
    if not question or references(question) != references(original):
        return rewrite_step(original)
    return question


async def rewrite_steps_with_llm(
    originals: Sequence[str],
    generator: Generator,
    role: str,
    seed_of: Callable[[int], int],
    max_tokens: int = 64,
) -> list[str]:
    """Symbolic steps rewritten by the model (greedy, one request each, sent together)."""
    symbolic = [i for i, text in enumerate(originals) if is_symbolic(text)]

    async def ask(i: int) -> str:
        prompt = render_prompt("apex_rewrite", step=originals[i])
        sampling = Sampling(
            temperature=0.0,
            max_tokens=max_tokens,
            stop=("</question>",),
            seed=seed_of(i),
            grammar=load_grammar("apex_rewrite", max_tokens),
        )
        [completion] = await sample_n(generator, Request((Message("user", prompt),), sampling, role))
        return accept_llm_rewrite(originals[i], completion.text)

    rewritten = dict(zip(symbolic, await asyncio.gather(*(ask(i) for i in symbolic))))
    return [rewritten.get(i, rewrite_step(text)) for i, text in enumerate(originals)]
