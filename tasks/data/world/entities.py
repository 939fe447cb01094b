"""The world's entities, their facts and the passage that states them.

A split's questions are drawn from a component of its own (``Component``): countries, cities in
them, companies headquartered in those cities and people born in and working for them. No entity
belongs to two components, so no entity of a valid or test question appears in a train question
(the splits are entity-disjoint by construction, not by filtering). Distractors are entities of a
further component that no question asks about; they are made from their index alone
(``distractor``), so a corpus of millions of passages streams out without being held.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ragfactory.tasks.data.world.facts import BY_SUBJECT, FILLERS, MENTIONS, RELATIONS
from ragfactory.tasks.data.world.names import Namer

KINDS = ("country", "city", "company", "person")
YEARS = {"born_year": (1900, 1999), "founded_year": (1800, 1999)}
# Kinds of the distractor component, cycled: mostly people, as in an encyclopedia.
DISTRACTOR_CYCLE = ("country", "city", "company", "person", "person", "city", "company", "person", "person", "person")


@dataclass
class Entity:
    kind: str
    index: int  # unique within its kind across the whole world: the name's index
    name: str
    facts: dict[str, str] = field(default_factory=dict)  # relation -> object (a name or a year)
    mentions: dict[str, str] = field(default_factory=dict)  # relation -> another object of its kind

    def passage(self, seed: int) -> tuple[str, str]:
        """(title, text): the name, then its facts in sentence forms drawn for this entity,
        in a drawn order with one filler sentence (and a mention of another object for each
        fact, when the world has them); the same on every machine for a seed."""
        rng = random.Random(f"{seed}:{self.kind}:{self.index}")
        sentences = [rng.choice(RELATIONS[r].sentences).format(s=self.name, o=o) for r, o in self.facts.items()]
        sentences.append(rng.choice(FILLERS[self.kind]).format(s=self.name))
        for relation, other in self.mentions.items():
            sentences.append(rng.choice(MENTIONS[RELATIONS[relation].object]).format(s=self.name, o=other))
        rng.shuffle(sentences)
        return self.name, " ".join(sentences)


class Allocator:
    """Hands out each kind's next name index, so no two entities of the world share a name."""

    def __init__(self, namer: Namer):
        self.namer = namer
        self.next = dict.fromkeys(KINDS, 0)

    def new(self, kind: str) -> Entity:
        index = self.next[kind]
        self.next[kind] += 1
        return Entity(kind, index, self.namer.name(kind, index))


def _other_object(rng: random.Random, relation: str, pools: dict[str, list[Entity]], fact: str) -> str:
    """An object of ``relation``'s kind drawn as a fact's is, other than ``fact``."""
    while (other := _draw_object(rng, relation, pools)) == fact:
        continue
    return other


def _draw_object(rng: random.Random, relation: str, pools: dict[str, list[Entity]]) -> str:
    if relation in YEARS:
        low, high = YEARS[relation]
        return str(rng.randint(low, high))
    return rng.choice(pools[RELATIONS[relation].object]).name


@dataclass
class Component:
    """The entities one split's questions are drawn from."""

    entities: dict[str, list[Entity]]

    @staticmethod
    def sizes(questions: int) -> dict[str, int]:
        """Sized so a split's questions rarely share an anchor: a person per question and a half,
        a city and a company per three questions, a country per twelve (at least a few each)."""
        return {
            "country": max(3, questions // 12),
            "city": max(6, questions // 3),
            "company": max(6, questions // 3),
            "person": max(8, questions * 3 // 2),
        }

    @classmethod
    def make(
        cls, allocator: Allocator, rng: random.Random, questions: int, mentions: random.Random | None = None
    ) -> Component:
        """The split's entities and their facts; with ``mentions`` (a generator of its own, so a
        world without them draws the same facts), each fact's subject also names another object
        of the fact's kind from the split's own entities."""
        sizes = cls.sizes(questions)
        pools: dict[str, list[Entity]] = {}
        for kind in KINDS:  # objects before subjects: countries, cities, companies, people
            pools[kind] = [allocator.new(kind) for _ in range(sizes[kind])]
            for entity in pools[kind]:
                for relation in BY_SUBJECT.get(kind, ()):
                    entity.facts[relation.name] = _draw_object(rng, relation.name, pools)
        if mentions is not None:
            for entity in (e for kind in KINDS for e in pools[kind]):
                entity.mentions = {r: _other_object(mentions, r, pools, fact) for r, fact in entity.facts.items()}
        return cls(pools)

    def all(self) -> list[Entity]:
        return [e for kind in KINDS for e in self.entities[kind]]

    def by_name(self) -> dict[str, Entity]:
        return {e.name: e for e in self.all()}


def distractor(namer: Namer, seed: int, base: dict[str, int], n: int, total: int) -> Entity:
    """The ``n``-th of ``total`` distractor entities (name indexes from ``base`` on), with facts
    whose objects are other distractors, drawn from its index alone."""
    cycle = len(DISTRACTOR_CYCLE)
    kind = DISTRACTOR_CYCLE[n % cycle]
    per_cycle = {k: DISTRACTOR_CYCLE.count(k) for k in KINDS}
    first = {k: DISTRACTOR_CYCLE.index(k) for k in KINDS}
    within = (n // cycle) * per_cycle[kind] + DISTRACTOR_CYCLE[: n % cycle].count(kind)
    entity = Entity(kind, base[kind] + within, namer.name(kind, base[kind] + within))
    rng = random.Random(f"{seed}:distractor:{n}")
    for relation in BY_SUBJECT.get(kind, ()):
        if relation.name in YEARS:
            entity.facts[relation.name] = str(rng.randint(*YEARS[relation.name]))
            continue
        # how many distractors of the object's kind the corpus holds (at least the first)
        count = max(1, (total - first[relation.object] + cycle - 1) // cycle * per_cycle[relation.object])
        entity.facts[relation.name] = namer.name(relation.object, base[relation.object] + rng.randrange(count))
    return entity
