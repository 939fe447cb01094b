"""A teacher for DecEx-RAG's search on the seeded world: decisions the world's oracle takes.

DecEx-RAG (§2.1–2.2) expands a state with a termination decision (Table 4), sub-questions
(Table 5) and a retrieval decision between self-answers (Table 6) and sub-queries (Table 7),
values every branch by rollouts (Table 8, Search-R1's loop) and keeps the best. With the
embedded 135M model as the policy its trees hold no right chain to learn from (docs/world.md).
On the seeded world this engine plays the stronger model the paper's search runs: it reads a
DecEx prompt (``history.py``'s layout) and writes what the question's gold decomposition calls
for, from what the prompt shows:

- termination: the next sub-question as ``<question>`` (its ``#n`` filled in from the answers so
  far), or, once every sub-question is answered, the final answer as ``<answer>``;
- sub-question: the same next sub-question after a line of thinking; sub-query: the sub-question
  itself, as the query;
- self-answer: a guess, a name no passage holds. It cannot know the world's invented facts, so a
  self-answer's rollouts score nothing and the retrieval decision searches;
- rollout: the next turn, in the step rendering the exports train: the open sub-question's
  ``<search>``, the next sub-question's step ending in its ``<search>``, or the final
  ``<answer>``.

A sub-question's answer is read from the history: its "Answer:" line (Table 8 calls the history
established facts), or the sentence of its search's documents that states the fact it asks for.
It never sees a gold answer: when the documents miss the fact it cannot go on, and guesses.

A sample at temperature ``t`` errs with probability ``t`` on a final answer: a name no passage
holds (or another year). DecEx's rollouts sample at the search's temperature (it has no greedy
rollout), so a retrieved sub-query is valued at about ``1 - t`` and a self-answer at 0, and a
state's termination votes hold right and wrong answers. The exports then pair the search over
each guess (a decision pair, whose two steps share the sub-question and differ from the
``<search>`` on) and the right final answer over each wrong one. A right final answer's
reasoning starts "So the answer is", a wrong one's "The answer is": the two differ from their
first token, so a preference pair over them moves what a model writes first, not only the words
after a shared opening (DPO's gradient on a token both share in the same context cancels).

The engine is ``backend: "world:decex-teacher"`` with ``options: {world: <folder>}``; the role's
model is unused. It answers DecEx-RAG prompts only.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ragfactory.tasks.data.world.oracle import final_answer, find_in_hits, resolve
from ragfactory.tasks.data.world.teaching import Gold, Teacher, errs, world_option, wrong_answer
from ragfactory.tasks.llm.registry import register_backend
from ragfactory.tasks.llm.types import Completion, Request
from ragfactory.tasks.prompts.loader import load_prompt
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.decex.config import BRANCH_PROMPTS, TERMINATION, grammar
from ragfactory.tasks.search.decex.history import EMPTY_HISTORY, Step, render_final, render_step

TEACHER = "world:decex-teacher"
TEACHER_VERSION = 1  # bump when the same prompt would get another output
ROLLOUT = "decex_rollout"
_QUESTION, _PREVIOUS, _OUTPUT = "### Question\n", "\n\n### Previous Iteration\n", "\n\n### Your Output"
_STEP = re.compile(r"^Step \d+:$", re.MULTILINE)
_SUB_QUESTION = re.compile(r"^Sub-question: (.*)$", re.MULTILINE)
_ANSWER = re.compile(r"^Answer: (.*)$", re.MULTILINE)
_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_INFORMATION = re.compile(r"<information>\n?(.*?)\n?</information>", re.DOTALL)
_DOC = re.compile(r'^Doc \d+: "(.*?)"\n(.*?)(?=\nDoc \d+: "|\Z)', re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Hop:
    """One sub-question of the history and what answered it: an "Answer:" line, or a search
    and its documents; neither while it is open."""

    question: str
    answer: str | None = None
    query: str | None = None
    docs: tuple[Hit, ...] = ()

    @property
    def open(self) -> bool:
        return self.answer is None and self.query is None


@cache
def _header(prompt: str) -> str:
    """A prompt's instructions: its template up to the question."""
    return load_prompt(prompt).partition(_QUESTION)[0]


def read_prompt(prompt: str) -> tuple[str, str, str]:
    """(prompt name, question, history text) of a DecEx prompt; the history is "" when the
    prompt has none, and a self-answer's or sub-query's question is its sub-question."""
    kind = next((p for p in (TERMINATION, ROLLOUT, *BRANCH_PROMPTS) if prompt.startswith(_header(p))), None)
    if kind is None:
        raise ValueError("the world's decex teacher answers DecEx-RAG prompts only: not one of their templates")
    body = prompt[len(_header(kind)) + len(_QUESTION) :].rpartition(_OUTPUT)[0]
    question, _, history = body.partition(_PREVIOUS)
    return kind, question.strip(), "" if history == EMPTY_HISTORY else history


def read_hops(transcript: str) -> list[Hop]:
    """The sub-questions of a history (and of a rollout's turns after it), in order."""
    hops = []
    for block in _STEP.split(transcript):
        sub, search, answer = _SUB_QUESTION.search(block), _SEARCH.search(block), _ANSWER.search(block)
        if sub is None and search is None:
            continue
        query = search.group(1).strip() if search else None
        info = _INFORMATION.search(block)
        docs = tuple(Hit("", t, x.strip(), 0.0) for t, x in _DOC.findall(info.group(1))) if info else ()
        question = sub.group(1).strip() if sub else query
        hops.append(Hop(question, answer.group(1).strip() if answer and not search else None, query, docs))
    return hops


def hop_answers(gold: Gold, hops: list[Hop]) -> list[str | None]:
    """Each closed sub-question's answer in gold order (None where its documents miss it)."""
    answers = []
    for hop, relation in zip([h for h in hops if not h.open], gold.relations):
        if hop.answer is not None:
            answers.append(hop.answer)
            continue
        match = find_in_hits(list(hop.docs), f"{hop.question} {hop.query}", relation)
        answers.append(None if match is None else match.group("o"))
    return answers


def right_answer(gold: Gold, answers: list[str | None]) -> str | None:
    """The question's answer from its sub-questions' answers; None while one is missing (or a
    comparison's is not a year)."""
    if len(answers) < len(gold.steps) or None in answers:
        return None
    try:
        return final_answer(gold.rung, gold.steps, answers)
    except ValueError:
        return None


def next_question(gold: Gold, answers: list[str | None]) -> str:
    """The next sub-question, ``#n`` filled in: the first unanswered one (asked again, as Table 4
    advises), the next of the decomposition, or its last once all are answered."""
    index = answers.index(None) if None in answers else min(len(answers), len(gold.steps) - 1)
    return resolve(gold.steps[index], answers)


def thinking(answers: list[str | None]) -> str:
    """The line of thinking before a sub-question: what the sub-questions so far found."""
    found = [a for a in answers if a is not None]
    if not found:
        return "The question needs this fact first."
    return f"The sub-questions so far found {', '.join(found)}; the question needs this fact next."


def final_reasoning(gold: Gold, answers: list[str | None], wrong: bool, rng: random.Random) -> tuple[str, str]:
    """(reasoning, answer) of a final answer: the right one, or when ``wrong`` or none can be
    read a guess worded as one."""
    right = right_answer(gold, answers)
    if right is not None and not wrong:
        return f"So the answer is {right}: the sub-questions found {' and '.join(answers)}.", right
    guess = wrong_answer(right, rng)
    return f"The answer is {guess}.", guess


class DecExTeacher(Teacher):
    """A ``Backend`` whose every completion is the oracle's DecEx output (module docstring)."""

    KIND, VERSION = "decex", TEACHER_VERSION

    def _step(self, request: Request, rng: random.Random) -> Completion:
        prompt = request.messages[0].content
        kind, question, history = read_prompt(prompt)
        wrong = errs(request.sampling.temperature, rng)
        if kind == "decex_self_answer":
            guess = wrong_answer(None, rng)
            text = f"I recall that it is {guess}. <answer>{guess}</answer>"
        elif kind == "decex_sub_query":
            text = question.splitlines()[0] if question else question
        else:
            if question not in self.gold:
                raise ValueError(f"the world's decex teacher has no question {question[:80]!r} in {self.folder}")
            turns = [m.content for m in request.messages[1:]]
            hops = read_hops("\n".join([history, *turns]))
            text = self._decide(kind, self.gold[question], hops, request, wrong, rng)
        return Completion(text, "stop", sum(len(m.content.split()) for m in request.messages), len(text.split()))

    def _decide(self, kind: str, gold: Gold, hops: list[Hop], request: Request, wrong: bool, rng) -> str:
        answers = hop_answers(gold, hops)
        searching = len(answers) < len(gold.steps) and None not in answers
        if kind == ROLLOUT:
            return self._rollout(gold, hops, answers, searching, wrong, rng)
        if kind == "decex_sub_question":
            return f"{thinking(answers)} <question>{next_question(gold, answers)}</question>"
        if searching and not _answer_forced(request):
            reason = "The sub-questions answered so far do not answer the question yet."
            return f"<reasoning>{reason}</reasoning> <question>{next_question(gold, answers)}</question>"
        reason, answer = final_reasoning(gold, answers, wrong, rng)
        return f"<reasoning>{reason}</reasoning> <answer>{answer}</answer>"

    def _rollout(self, gold: Gold, hops: list[Hop], answers: list, searching: bool, wrong: bool, rng) -> str:
        if hops and hops[-1].open:
            return f"<search> {hops[-1].question} </search>"
        if searching:
            query = next_question(gold, answers)
            return render_step(len(hops) + 1, Step(thinking(answers), query, query=query), with_documents=False)
        return render_final(*final_reasoning(gold, answers, wrong, rng))


def _answer_forced(request: Request) -> bool:
    """Whether a termination request's grammar allows the final answer only (the closing vote)."""
    held = request.sampling.grammar
    if held is None or held.name != TERMINATION:
        return False
    return held.text == grammar(TERMINATION, request.sampling.max_tokens, outcome="answer").text


def make_teacher(role, cache_dir: Path | None) -> DecExTeacher:
    """The engine ``backend: "world:decex-teacher"`` names; ``options: {world: <folder>}``."""
    return DecExTeacher(world_option(TEACHER, role.options))


register_backend(TEACHER, make_teacher, replace=True)
