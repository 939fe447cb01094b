"""The world's questions in rungs, each with its gold decomposition, answers and supporting passages.

The rungs climb in the number of reads a question needs:

- ``lookup``: one fact of one entity ("In which city was Tharo Vekin born?");
- ``bridge``: two facts in a row, the second about the first's answer (MuSiQue's 2-hop form, the
  decomposition's second step says ``#1``);
- ``comparison``: one fact of each of two entities, then a comparison (HotpotQA's comparison
  form; the decomposition asks for both facts);
- ``chain``: three facts in a row (``#1`` then ``#2``).

Every step of a decomposition is a one-hop question whose answer its subject's passage states.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ragfactory.tasks.data.world.entities import Component, Entity
from ragfactory.tasks.data.world.facts import RELATIONS

RUNGS = ("lookup", "bridge", "comparison", "chain")

# (relations in order, the question; "{s}" the first subject)
BRIDGES = (
    (("born_in", "located_in"), "In which country was {s} born?"),
    (("works_for", "headquartered_in"), "In which city is the company that {s} works for headquartered?"),
    (("works_for", "founded_year"), "In what year was the company that {s} works for founded?"),
    (("headquartered_in", "located_in"), "In which country is {s} headquartered?"),
)
CHAINS = (
    (("works_for", "headquartered_in", "located_in"), "In which country is the company that {s} works for based?"),
)
COMPARISONS = (
    ("person", "born_year", "Who was born first, {a} or {b}?"),
    ("company", "founded_year", "Which company was founded first, {a} or {b}?"),
)


@dataclass
class Question:
    rung: str
    question: str
    answer: str
    steps: list[dict]  # {"question", "answer", "relation", "subject"}; "#n" marks earlier answers
    entities: list[str]  # every entity the question or its decomposition names, answers included


def follow(component: Component, subject: Entity, relations: tuple[str, ...]) -> list[dict]:
    """The steps that walk ``relations`` from ``subject``; each later step asks about ``#n``."""
    names, steps, current = component.by_name(), [], subject
    for n, relation in enumerate(relations):
        shown = current.name if n == 0 else f"#{n}"
        spec = RELATIONS[relation]
        template = spec.question if n == 0 else spec.ref_question
        answer = current.facts[relation]
        steps.append(
            {"question": template.format(s=shown), "answer": answer, "relation": relation, "subject": current.name}
        )
        current = names.get(answer)
    return steps


def _chain_question(component: Component, rng: random.Random, forms) -> Question:
    relations, text = rng.choice(forms)
    subject = rng.choice(component.entities[RELATIONS[relations[0]].subject])
    steps = follow(component, subject, relations)
    entities = [subject.name, *(s["answer"] for s in steps if not s["answer"].isdigit())]
    rung = {1: "lookup", 2: "bridge", 3: "chain"}[len(relations)]
    return Question(rung, text.format(s=subject.name), steps[-1]["answer"], steps, entities)


def _lookup(component: Component, rng: random.Random) -> Question:
    relation = rng.choice(sorted(RELATIONS))
    return _chain_question(component, rng, (((relation,), RELATIONS[relation].question),))


def _comparison(component: Component, rng: random.Random) -> Question:
    kind, relation, text = rng.choice(COMPARISONS)
    pool = component.entities[kind]
    for _ in range(100):  # two entities whose years differ (ties have no answer)
        a, b = rng.sample(pool, 2)
        if a.facts[relation] != b.facts[relation]:
            break
    else:
        raise ValueError(f"no two {kind}s with different {relation} to compare")
    steps = [
        {
            "question": RELATIONS[relation].question.format(s=e.name),
            "answer": e.facts[relation],
            "relation": relation,
            "subject": e.name,
        }
        for e in (a, b)
    ]
    first = a if int(a.facts[relation]) < int(b.facts[relation]) else b
    return Question("comparison", text.format(a=a.name, b=b.name), first.name, steps, [a.name, b.name])


MAKERS = {
    "lookup": _lookup,
    "bridge": lambda c, rng: _chain_question(c, rng, BRIDGES),
    "comparison": _comparison,
    "chain": lambda c, rng: _chain_question(c, rng, CHAINS),
}


def make_questions(component: Component, rng: random.Random, n: int, rungs: tuple[str, ...]) -> list[Question]:
    """``n`` distinct questions of ``component``, rungs in turn (an equal mix, in a drawn order)."""
    order = [rungs[i % len(rungs)] for i in range(n)]
    rng.shuffle(order)
    seen, questions = set(), []
    for rung in order:
        for _ in range(50):
            q = MAKERS[rung](component, rng)
            if q.question not in seen:
                break
        else:
            raise ValueError(f"the world ran out of distinct {rung} questions at {len(questions)}")
        seen.add(q.question)
        questions.append(q)
    return questions
