"""A teacher for R3-RAG's cold start on the seeded world: trajectories the world's oracle writes.

R3-RAG's cold start (§3.2) has a larger model write trajectories, keeps those whose answers are
right (best-of-N) and trains the small policy on them (Algorithm 2). On the seeded world
(docs/world.md) the oracle of ``tasks/data/world/oracle.py`` plays the larger model: given a
step prompt (the question, and the earlier steps' queries and the documents they retrieved) it
writes the next step of the question's gold decomposition: its next sub-question, with ``#n``
filled in from what the documents say, as the retrieval query, or the final answer once every
sub-question is answered. It never sees a gold answer, only the documents the build retrieved:
a fact the retriever missed leaves it without an answer, as it would a model.

Every step is a sample of its own, and a sample at temperature ``t`` errs with probability ``t``,
the ways the embedded model does: a query step held to a query (``r3_query``) asks about a name
no passage holds, the sub-question's entity swapped out, so its documents answer nothing; a free
query step answers at once with a guess; an answer step gives a name no passage holds (or another
year). A wrong query leaves every later step without the fact, so its attempt ends wrong. R3's
attempts run at rising temperatures, so best-of-N has right and wrong attempts to tell apart, the
exports keep the right ones (attempt 0 is greedy and never errs), and a control can train on the
wrong ones (``benchmarks/learning.py``).

The engine is ``backend: "world:r3-teacher"`` with ``options: {world: <folder>}`` (a folder
``ragfactory world`` wrote); the role's model is unused. It answers R3 step prompts only.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from ragfactory.tasks.data.world.oracle import final_answer, read_hits, resolve, subject_of
from ragfactory.tasks.data.world.teaching import Gold, Teacher, errs, world_option, wrong_answer
from ragfactory.tasks.llm.registry import register_backend
from ragfactory.tasks.llm.types import Completion, Request
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.r3.steps import QUERY, Step, step_text

TEACHER = "world:r3-teacher"
TEACHER_VERSION = 2  # bump when the same prompt would get another step
_QUESTION = re.compile(r"#### Current Input:\nThe question: (.*?)(?:\. The Previous Steps:|\n#### Output:)", re.DOTALL)
_STEP = re.compile(r"^Step \d+:$", re.MULTILINE)
_DOC = re.compile(r"^\(\d+\) (.+?): (.*)$", re.MULTILINE)


def read_prompt(prompt: str) -> tuple[str, list[tuple[str, list[Hit]]]]:
    """(question, [(query, documents), ...]) of an R3 step prompt (``steps.py``'s layout)."""
    match = _QUESTION.search(prompt)
    if match is None:
        raise ValueError("the world teacher answers R3 step prompts only: no 'The question:' line")
    previous = prompt[match.end() :]
    blocks = _STEP.split(previous)[1:]
    steps = []
    for block in blocks:
        query = next((line[len(QUERY) :].strip() for line in block.splitlines() if line.startswith(QUERY)), "")
        steps.append((query, [Hit("", t, x, 0.0) for t, x in _DOC.findall(block)]))
    return match.group(1).strip(), steps


class WorldTeacher(Teacher):
    """A ``Backend`` whose every completion is the oracle's next R3 step (module docstring)."""

    KIND, VERSION = "r3", TEACHER_VERSION

    def _step(self, request: Request, rng: random.Random) -> Completion:
        prompt = request.messages[-1].content
        question, previous = read_prompt(prompt)
        if question not in self.gold:
            raise ValueError(f"the world teacher has no question {question[:80]!r} in {self.folder}")
        gold = self.gold[question]
        answers = [read_hits(docs, query, rel) for (query, docs), rel in zip(previous, gold.relations)]
        forced = request.sampling.grammar.name if request.sampling.grammar else None
        if len(previous) < len(gold.steps) and None not in answers and forced != "r3_answer":
            step = self._query(resolve(gold.steps[len(previous)], answers), forced, request, rng)
        else:
            answer = self._answer(gold, answers, request, rng)
            step = Step("The documents answer every part of the question.", answer=answer)
        text = step_text(step)
        return Completion(text, "stop", len(prompt.split()), len(text.split()))

    @staticmethod
    def _query(query: str, forced: str | None, request: Request, rng: random.Random) -> Step:
        """The next sub-question as the query; erring, another entity's, or a guess at once."""
        if errs(request.sampling.temperature, rng):
            if forced != "r3_query":
                return Step("I know this one.", answer=wrong_answer(None, rng))
            name, other = subject_of(query), wrong_answer(None, rng)
            query = query.replace(name, other) if name else other
        return Step(f"To answer it, first: {query}", query=query)

    def _answer(self, gold: Gold, answers: list[str | None], request: Request, rng: random.Random) -> str:
        right = final_answer(gold.rung, gold.steps, answers) if answers and None not in answers else None
        if right is not None and not errs(request.sampling.temperature, rng):
            return right
        return wrong_answer(right, rng)


def make_teacher(role, cache_dir: Path | None) -> WorldTeacher:
    """The engine ``backend: "world:r3-teacher"`` names; ``options: {world: <folder>}``."""
    return WorldTeacher(world_option(TEACHER, role.options))


register_backend(TEACHER, make_teacher, replace=True)
