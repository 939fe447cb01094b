"""R3-RAG's step format (Eq. 1 and Figs. 6-7): what a step's prompt shows and how it reads.

A step is "The problem analysis: …" followed by "The retrieval query: …" or "The final answer:
…" (the Figs. 6-7 answer format). The first step's prompt is Fig. 6 with the question; later
steps' is Fig. 7 with the previous steps, each written as

    Step k:
    The problem analysis: …
    The retrieval query: …
    The retrieval documents:
    (1) Title: text …

Algorithm 1 reads a step by which of the two actions it holds; one with neither (or an empty
one) ends the trajectory as a format error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ragfactory.tasks.prompts.loader import render_prompt
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.parsing import Parsed

ANALYSIS = "The problem analysis:"
QUERY = "The retrieval query:"
ANSWER = "The final answer:"
_ACTION = re.compile(r"^[ \t]*(The retrieval query:|The final answer:)[ \t]*(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Step:
    """A finished step of a trajectory, as the next prompt shows it."""

    analysis: str
    query: str | None = None
    answer: str | None = None
    docs: tuple[Hit, ...] = ()


def parse_step(text: str | None) -> Parsed:
    """``analysis`` and ``action`` (query / answer) with its ``content``; the last action line
    counts (an analysis may quote the markers).

    >>> parse_step("The problem analysis: Who directed it?\\nThe retrieval query: Jaws director").fields
    {'analysis': 'Who directed it?', 'action': 'query', 'content': 'Jaws director'}
    >>> parse_step("Spielberg.").error
    "missing 'The problem analysis:'"
    """
    body = (text or "").strip()
    fields = {"analysis": None, "action": None, "content": None}
    if not body:
        return Parsed(fields, "empty output")
    start = body.find(ANALYSIS)
    if start < 0:
        return Parsed(fields, f"missing {ANALYSIS!r}")
    actions = list(_ACTION.finditer(body, start))
    if not actions:
        return Parsed(fields, f"missing {QUERY!r} or {ANSWER!r}")
    last = actions[-1]
    fields["analysis"] = body[start + len(ANALYSIS) : last.start()].strip()
    fields["action"] = "query" if last.group(1) == QUERY else "answer"
    fields["content"] = last.group(2).strip()
    if not fields["content"]:
        return Parsed(fields, f"empty {last.group(1)[4:-1]}")
    return Parsed(fields, None)


def documents_text(docs: Sequence[Hit], doc_chars: int) -> str:
    """Numbered documents, each cut to ``doc_chars`` characters."""
    return "\n".join(f"({i}) {hit.title}: {hit.text[:doc_chars]}" for i, hit in enumerate(docs, 1))


def format_steps(steps: Sequence[Step], doc_chars: int) -> str:
    """The previous steps as Fig. 7's prompt shows them (module docstring)."""
    blocks = []
    for k, step in enumerate(steps, 1):
        lines = [f"Step {k}:", f"{ANALYSIS} {step.analysis}"]
        if step.query is not None:
            lines += [f"{QUERY} {step.query}", "The retrieval documents:", documents_text(step.docs, doc_chars)]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def step_prompt(question: str, steps: Sequence[Step], doc_chars: int) -> str:
    """The user turn of the next step: Fig. 6 for the first, Fig. 7 after it."""
    if not steps:
        return render_prompt("r3_first", question=question)
    return render_prompt("r3_next", question=question, steps=format_steps(steps, doc_chars))


def step_text(step: Step) -> str:
    """A step as the model writes it (the SFT target, Algorithm 2)."""
    action = f"{QUERY} {step.query}" if step.query is not None else f"{ANSWER} {step.answer}"
    return f"{ANALYSIS} {step.analysis}\n{action}"
