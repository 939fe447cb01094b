"""A teacher for ReasonRAG's search on the seeded world: steps the world's oracle writes.

ReasonRAG's MCTS (§2.2) samples a policy's Reasoning and Grounding steps, values each by the
outcome of the trajectories below it (SPRE, Eq. 1) and pairs siblings by value. With the
embedded 135M model as the policy, the trees hold almost no right trajectory to prefer. On the
seeded world (docs/world.md) this engine plays a stronger policy: it reads a Reasoning or
Grounding prompt (``steps.py``'s layout) and writes the step its question's gold decomposition
calls for, from what the prompt shows:

- Reasoning: the next sub-question as ``<query>`` (its ``#n`` filled in from the evidence so
  far), or, once every sub-question has its evidence, the ``<answer>`` that evidence gives;
- Grounding: the sentence of the retrieved documents that states the fact the last query asks
  for as ``<evidence>``, or ``None`` when no document states it.

It never sees a gold answer. A sample at temperature ``t`` errs with probability ``t``, as a
small model does: a Reasoning step answers with a name no passage holds, worded as the embedded
model words a guess ("The answer is X." before the tag), instead of searching or of the
evidence's answer; a Grounding step states the sentence with another object. So siblings
differ, SPRE values the right step above the wrong one (its greedy rollouts, at temperature 0,
never err), and the exported pairs prefer searching to guessing, faithful evidence to invented,
and the evidence's answer to another. A right Reasoning step starts "So the", a wrong one "The
answer is": the two differ from their first token, so a preference pair over them moves what a
model writes first, not only the words after a shared opening (DPO's gradient on a token both
share in the same context cancels).

The engine is ``backend: "world:mcts-teacher"`` with ``options: {world: <folder>}``; the role's
model is unused. It answers ReasonRAG step prompts only.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from ragfactory.tasks.data.world.facts import read_fact
from ragfactory.tasks.data.world.oracle import final_answer, find_in_hits, resolve
from ragfactory.tasks.data.world.teaching import Gold, Teacher, errs, world_option, wrong_answer
from ragfactory.tasks.llm.registry import register_backend
from ragfactory.tasks.llm.types import Completion, Request
from ragfactory.tasks.retrieval.types import Hit

TEACHER = "world:mcts-teacher"
TEACHER_VERSION = 1  # bump when the same prompt would get another step
_QUESTION = re.compile(r"\AQuestion: (.*?)(?:\nPrevious Thoughts: |\nReference: |\Z)", re.DOTALL)
_THOUGHTS = re.compile(r"\nPrevious Thoughts: (.*?)(?:\nReference: <reference>|\Z)", re.DOTALL)
_TAG = re.compile(r"<(query|evidence|answer)>(.*?)</\1>", re.DOTALL)
_REFERENCE = re.compile(r"\nReference: <reference>(.*)</reference>\Z", re.DOTALL)
_DOC = re.compile(r"Wikipedia Title: (.*?)\n(.*?)(?=\n\nWikipedia Title: |\Z)", re.DOTALL)
_NAME = re.compile(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*")


def read_prompt(prompt: str) -> tuple[str, list[tuple[str, str]], list[tuple[str, str]] | None]:
    """(question, [(tag, content), ...] of the thoughts, [(title, text), ...] of the documents or
    None for a Reasoning prompt) of a ReasonRAG step's user turn."""
    match = _QUESTION.match(prompt)
    if match is None:
        raise ValueError("the world's mcts teacher answers ReasonRAG step prompts only: no 'Question:' line")
    thoughts = _THOUGHTS.search(prompt)
    tags = _TAG.findall(thoughts.group(1)) if thoughts else []
    reference = _REFERENCE.search(prompt)
    docs = None if reference is None else [(t, x.strip()) for t, x in _DOC.findall(reference.group(1))]
    return match.group(1).strip(), tags, docs


def read_evidence(evidence: str, query: str, relation: str) -> str | None:
    """The object ``evidence`` states for the entity ``query`` names, or None."""
    for subject in _NAME.findall(query):
        if (value := read_fact(evidence, subject, relation)) is not None:
            return value
    return None


class MctsTeacher(Teacher):
    """A ``Backend`` whose every completion is the oracle's next ReasonRAG step (module docstring)."""

    KIND, VERSION = "mcts", TEACHER_VERSION

    def _step(self, request: Request, rng: random.Random) -> Completion:
        prompt = request.messages[-1].content
        question, tags, docs = read_prompt(prompt)
        if question not in self.gold:
            raise ValueError(f"the world's mcts teacher has no question {question[:80]!r} in {self.folder}")
        gold, wrong = self.gold[question], errs(request.sampling.temperature, rng)
        queries = [content.strip() for tag, content in tags if tag == "query"]
        if docs is not None:
            text = self._grounding(gold, queries, docs, wrong, rng)
        else:
            forced = request.sampling.grammar.name if request.sampling.grammar else None
            text = self._reasoning(gold, tags, queries, forced, wrong, rng)
        return Completion(text, "stop", len(prompt.split()), len(text.split()))

    def _reasoning(self, gold: Gold, tags: list, queries: list[str], forced: str | None, wrong: bool, rng) -> str:
        evidence = [content for tag, content in tags if tag == "evidence"]
        answers = [read_evidence(e, q, r) for e, q, r in zip(evidence, queries, gold.relations)]
        searching = len(queries) < len(gold.steps) and None not in answers and forced != "reasonrag_final"
        if forced == "reasonrag_query" or (searching and not wrong):
            step = gold.steps[min(len(queries), len(gold.steps) - 1)]
            return f"So the next query is <query>{resolve(step, answers)}"
        right = None if searching or not answers or None in answers else final_answer(gold.rung, gold.steps, answers)
        if right is not None and not wrong:
            return f"So the answer is <answer>{right}"
        guess = wrong_answer(right, rng)
        return f"The answer is {guess}. <answer>{guess}"

    def _grounding(self, gold: Gold, queries: list[str], docs: list, wrong: bool, rng) -> str:
        lead = "Based on the query, the relevant evidence is <evidence>"
        if not queries or len(queries) > len(gold.relations):
            return f"{lead}None"
        hits = [Hit("", title, text, 0.0) for title, text in docs]
        match = find_in_hits(hits, queries[-1], gold.relations[len(queries) - 1])
        if match is None:
            return f"{lead}None"
        sentence, value = match.group(0).strip(), match.group("o")
        return lead + (sentence.replace(value, wrong_answer(value, rng)) if wrong else sentence)


def make_teacher(role, cache_dir: Path | None) -> MctsTeacher:
    """The engine ``backend: "world:mcts-teacher"`` names; ``options: {world: <folder>}``."""
    return MctsTeacher(world_option(TEACHER, role.options))


register_backend(TEACHER, make_teacher, replace=True)
