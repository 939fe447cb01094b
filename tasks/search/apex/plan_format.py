"""Plans as text and as rows: the planner prompt, its parser, gold plans (APEX-Searcher, §2.2.2, §2.4.1).

The planner (``apex_plan`` prompt) writes an ordered list of sub-questions between ``<plan>`` and
``</plan>``, one numbered line each, with ``#n`` standing for the answer of sub-question n. The
paper's training template constrains plans to "a manageable number of steps" and makes
dependencies explicit through ``#n``; the parser checks both. Parsing is tolerant of the rest:
a missing ``<plan>`` tag (the lines are read from the whole output), bullets instead of numbers,
prose around the list. A plan is a format error when it has no sub-question line, more than
``max_steps`` of them, or a ``#n`` that is not an earlier step (such a plan cannot be executed);
its steps are still kept for inspection, but it scores 0 and is not executed.

Gold plans come from the ``questions.gold_plan`` column (MuSiQue's decomposition) or any other
field a user names, inside the row or its ``metadata`` JSON: a list of step objects with a
``question``, a list of strings, or either as JSON text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.llm.types import Grammar
from ragfactory.tasks.prompts.loader import load_grammar, render_prompt
from ragfactory.tasks.search.apex.plan_rewrite import references
from ragfactory.tasks.search.parsing import tag_span, visible_text

MAX_STEPS = 5  # the template's step bound; MuSiQue's longest gold plans have 4 steps, one spare
MAX_GRAMMAR_STEPS = 8  # apex_plan.lark spells out steps1 .. steps8
PLAN_STOP = ("</plan>",)
_STEP_LINE = re.compile(r"^\s*(?:(?:step|sub-?question|q)?\s*\d+\s*[.):\-]|[-*•])\s*(?P<text>.*?)\s*$", re.IGNORECASE)
_MARKUP = re.compile(r"^(?:\*\*|__|[\"'“”])+|(?:\*\*|__|[\"'“”])+$")


@dataclass(frozen=True)
class PlanStep:
    """One sub-question of a plan: what is scored and executed, and the text it came from."""

    step: int
    question: str
    original: str
    depends_on: tuple[int, ...] = ()

    def row(self) -> dict[str, Any]:
        """The ``plans.steps`` struct."""
        return {
            "step": self.step,
            "question": self.question,
            "original": self.original,
            "depends_on": list(self.depends_on),
        }


@dataclass(frozen=True)
class ParsedPlan:
    steps: tuple[PlanStep, ...]
    error: str | None = None

    @property
    def questions(self) -> list[str]:
        return [step.question for step in self.steps]


def planner_prompt(question: str, max_steps: int = MAX_STEPS) -> str:
    return render_prompt("apex_plan", question=question, max_steps=str(max_steps))


def plan_grammar(max_tokens: int, max_steps: int = MAX_STEPS, field: str = "max_tokens") -> Grammar:
    """The planner's output grammar: ``<plan>``, 1 to ``max_steps`` numbered lines, ``#n`` only
    of earlier steps, fitted to ``max_tokens``."""
    if not 1 <= max_steps <= MAX_GRAMMAR_STEPS:
        raise ValueError(f"max_steps must be in 1..{MAX_GRAMMAR_STEPS}, got {max_steps}")
    return load_grammar("apex_plan", max_tokens, field, max_steps=max_steps)


def parse_plan(text: str | None, max_steps: int = MAX_STEPS) -> ParsedPlan:
    """The sub-questions of a planner output, and why it is malformed (``None`` when it is not).

    >>> plan = parse_plan("<plan>\\n1. Who directed Jaws?\\n2. Who is the mother of #1?\\n</plan>")
    >>> plan.questions, plan.steps[1].depends_on, plan.error
    (['Who directed Jaws?', 'Who is the mother of #1?'], (1,), None)
    >>> parse_plan("1. Who is the mother of #2?\\n2. Who directed Jaws?").error
    'step 1 refers to #2, which is not an earlier step'
    """
    body = visible_text(text)
    if not body:
        return ParsedPlan((), "empty output")
    span = tag_span(body, "plan")
    lines = (span[1] if span is not None else body).splitlines()
    steps = []
    for line in lines:
        match = _STEP_LINE.match(line)
        question = _MARKUP.sub("", match["text"]).strip() if match else ""
        if question:
            steps.append(PlanStep(len(steps) + 1, question, line.strip(), tuple(references(question))))
    return ParsedPlan(tuple(steps), plan_error(steps, max_steps))


def plan_error(steps: list[PlanStep], max_steps: int) -> str | None:
    if not steps:
        return "no numbered sub-questions"
    if len(steps) > max_steps:
        return f"{len(steps)} sub-questions exceed the limit of {max_steps}"
    for step in steps:
        for ref in step.depends_on:
            if not 1 <= ref < step.step:
                return f"step {step.step} refers to #{ref}, which is not an earlier step"
    return None


def gold_plan_texts(question: Mapping[str, Any], field: str = "gold_plan") -> list[str] | None:
    """The gold plan's steps as written, from ``question[field]`` or its ``metadata`` JSON.

    ``None`` when the question has no gold plan; a value of the wrong shape is an error naming
    the question and the field.
    """
    value = question.get(field)
    if value is None and isinstance(question.get("metadata"), str) and question["metadata"]:
        value = json.loads(question["metadata"]).get(field)
    if value is None:
        return None
    try:
        return plan_texts(value)
    except ValueError as exc:
        raise ValueError(f"question {question.get('question_id')!r}: field {field!r}: {exc}") from None


def plan_texts(value: Any) -> list[str]:
    """Sub-question texts from a list of strings or of ``{"question": ...}`` objects (or JSON).

    >>> plan_texts('[{"step": 1, "question": "Who directed Jaws?"}, "Who is the mother of #1?"]')
    ['Who directed Jaws?', 'Who is the mother of #1?']
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"a plan is a list of steps, got {type(value).__name__}")
    texts = []
    for i, step in enumerate(value, start=1):
        text = step.get("question") if isinstance(step, Mapping) else step
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"step {i} has no question text: {step!r}")
        texts.append(" ".join(text.split()))
    return texts
