"""DecEx-RAG's step format: how each decision's output reads (Appendix A.1).

The termination prompt (Table 4) answers ``<reasoning>`` plus ``<answer>`` or ``<question>``; the
sub-question prompt (Table 5) free thinking plus ``<question>``; the self-answer prompt (Table 6)
thinking plus ``<answer>``; the sub-query prompt (Table 7) the bare query. A rollout turn (Table
8) is Search-R1's, read by ``tasks/search/parsing.py`` ``parse_rollout_turn``. Parsing is as
tolerant as the shared tag primitives it uses: a missing or empty tag is the node's
``format_error``, never an exception.
"""

from __future__ import annotations

from ragfactory.tasks.search.parsing import (
    Parsed,
    first_tag,
    parse_query,
    parse_tagged,
    reasoning,
    required,
    visible_text,
)


def parse_termination(text: str | None) -> Parsed:
    """Table 4: ``decision`` is "terminate" (``<answer>``), "continue" (``<question>``) or None.

    When both tags appear the first one decides, as a reader of the output would take it.
    """
    body = visible_text(text)
    first = first_tag(body, ("answer", "question"))
    if first is None:
        error = "empty output" if not body else "missing <answer> or <question>"
        return Parsed({"decision": None, "reasoning": body or None}, error)
    tag = first[0]
    content, error = required(body, tag)
    decision = None if error else ("terminate" if tag == "answer" else "continue")
    return Parsed({"decision": decision, "reasoning": reasoning(body, tag), tag: content}, error)


def parse_sub_question(text: str | None) -> Parsed:
    """Table 5: thinking, then ``<question>``."""
    return parse_tagged(text, "question")


def parse_self_answer(text: str | None) -> Parsed:
    """Table 6: thinking, then ``<answer>``."""
    return parse_tagged(text, "answer")


def parse_sub_query(text: str | None) -> Parsed:
    """Table 7: the query itself; a tag, a "Query:" prefix or quotes around it are dropped."""
    return parse_query(text)
