"""ReasonRAG's step format (§2.4 and Figs. 12-13), shared by the MCTS search and the
agentic evaluation: what a Reasoning or Grounding turn shows the model, and how its output reads.

The user turn follows the authors' released pipeline: "Question: …", then "Previous Thoughts:"
with the earlier outputs joined by spaces, and for Grounding the documents under "Reference:" as
"Wikipedia Title: …" blocks. Generation stops at the closing tags; ``closed`` restores the tag the
stop string cut before an output joins the thoughts. An output's action is the first of
``<query>``, ``<answer>``, ``<evidence>`` it opens; none of them, or an empty one, is a format
error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.parsing import Parsed, first_tag, visible_text

REASONING, GROUNDING = "reasoning", "grounding"
ACTION_TAGS = ("query", "answer", "evidence")
STOP = ("</answer>", "</query>", "</evidence>")


def parse_turn(text: str | None) -> Parsed:
    """``action`` is the first of query / answer / evidence the output opens (None: malformed).

    >>> parse_turn("So the next query is <query>Jaws director").fields
    {'action': 'query', 'content': 'Jaws director'}
    >>> parse_turn("I do not know.").error
    'missing <query>, <answer> or <evidence>'
    """
    body = visible_text(text)
    first = first_tag(body, ACTION_TAGS)
    if first is None:
        error = "missing <query>, <answer> or <evidence>" if body else "empty output"
        return Parsed({"action": None, "content": None}, error)
    tag, content = first
    return Parsed({"action": tag, "content": content or None}, None if content else f"empty <{tag}>")


def closed(text: str, action: str | None) -> str:
    """The output with the closing tag of its action restored (engines drop the stop string)."""
    body = text.strip()
    if action is None or re.search(rf"<\s*/\s*{action}\s*>", body, re.IGNORECASE):
        return body
    return f"{body}</{action}>"


def reasoning_input(question: str, thoughts: Sequence[str]) -> str:
    """The user turn of a Reasoning round: the question and the thoughts so far."""
    if not thoughts:
        return f"Question: {question}"
    return f"Question: {question}\nPrevious Thoughts: {' '.join(thoughts)}"


def grounding_input(question: str, thoughts: Sequence[str], docs: Sequence[Hit]) -> str:
    """The user turn of a Grounding round: the Reasoning turn plus the retrieved documents."""
    return f"{reasoning_input(question, thoughts)}\nReference: <reference>{render_wikipedia(docs)}</reference>"


def render_wikipedia(hits: Sequence[Hit]) -> str:
    """Documents as the Grounding prompt's "Wikipedia documents" (ReasonRAG's reference layout)."""
    return "".join(f"Wikipedia Title: {hit.title}\n{hit.text}\n\n" for hit in hits).strip()
