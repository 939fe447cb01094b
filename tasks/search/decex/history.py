"""DecEx-RAG states as text: the iteration history the prompts read and the exports train on.

A state is s_t = [Q, (q_1, r_1), …, (q_t, r_t)] (DecEx-RAG, §2.1): ``Step`` is one (q_i, r_i), where
r_i is a self-answer w_i or a sub-query e_i with its documents d_i. The termination and rollout
prompts (Tables 4 and 8) read the steps as their "Previous Iteration"; the SFT and DPO exports
(§2.3) write the same rendering as the model's output, so a trained model produces what the
prompts read. The paper does not print this layout, so it follows the prompts' own wording:
each iteration shows "the thinking process, sub-question, the model's answers to the
sub-questions based on its own knowledge or the relevant documents retrieved", and retrieval
uses Table 8's ``<search>`` / ``<information>`` tags with documents numbered as in Table 3.

The sub-question prompt (Table 5) has no history placeholder, yet from the second layer on the
next sub-question depends on the answers so far; the history goes into its ``{question}`` under
the same "### Previous Iteration" heading as Tables 4 and 8. Tables 6 and 7 read the
sub-question alone, as printed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ragfactory.tasks.prompts.loader import render_prompt
from ragfactory.tasks.retrieval.types import Hit

EMPTY_HISTORY = "None"


@dataclass(frozen=True)
class Step:
    """One iteration (q_i, r_i); ``answer`` and ``query`` are both None while r_i is undecided."""

    reasoning: str
    question: str
    answer: str | None = None
    query: str | None = None
    documents: tuple[Hit, ...] = ()


def render_documents(hits: Iterable[Hit]) -> str:
    return "\n".join(f"Doc {i}: {hit.contents}" for i, hit in enumerate(hits, start=1))


def render_information(hits: Sequence[Hit]) -> str:
    """The ``<information>`` block a search is answered with (Table 8)."""
    return f"<information>\n{render_documents(hits)}\n</information>"


def render_step(index: int, step: Step, with_documents: bool = True) -> str:
    """Iteration ``index`` (1-based); without documents it ends at the ``<search>`` call."""
    lines = [f"Step {index}:"]
    if step.reasoning:
        lines.append(step.reasoning)
    lines.append(f"Sub-question: {step.question}")
    if step.answer is not None:
        lines.append(f"Answer: {step.answer}")
    if step.query is not None:
        lines.append(f"<search> {step.query} </search>")
        if with_documents:
            lines.append(render_information(step.documents))
    return "\n".join(lines)


def render_history(steps: Sequence[Step]) -> str:
    if not steps:
        return EMPTY_HISTORY
    return "\n\n".join(render_step(i, step) for i, step in enumerate(steps, start=1))


def render_final(reasoning: str | None, answer: str) -> str:
    """The final answer o, after the reasoning that led to it."""
    tail = f"<answer> {answer} </answer>"
    return f"{reasoning}\n{tail}" if reasoning else tail


def termination_prompt(question: str, steps: Sequence[Step]) -> str:
    return render_prompt("decex_termination", question=question, iter_history=render_history(steps))


def sub_question_prompt(question: str, steps: Sequence[Step]) -> str:
    if steps:
        question = f"{question}\n\n### Previous Iteration\n{render_history(steps)}"
    return render_prompt("decex_sub_question", question=question)


def self_answer_prompt(sub_question: str) -> str:
    return render_prompt("decex_self_answer", question=sub_question)


def sub_query_prompt(sub_question: str) -> str:
    return render_prompt("decex_sub_query", question=sub_question)


def rollout_prompt(question: str, steps: Sequence[Step]) -> str:
    return render_prompt("decex_rollout", question=question, iter_history=render_history(steps))


def parsed_fields(node: Mapping) -> dict:
    """A node row's (or node's) ``parsed``, whether JSON text or a dict."""
    parsed = node.get("parsed") if isinstance(node, Mapping) else node.parsed
    if parsed is None or parsed == "":
        return {}
    return json.loads(parsed) if isinstance(parsed, str) else dict(parsed)


def steps_from_chain(chain: Sequence[tuple[str, Mapping]]) -> list[Step]:
    """The steps of a root-to-node chain of (kind, parsed) pairs.

    A sub-question opens a step; the self-answer or sub-query after it closes the step; other
    kinds (root, termination, answer, rollout leaves) carry no step. A chain ending on a
    sub-question yields a last step with ``answer`` and ``query`` still None.
    """
    steps: list[Step] = []
    for kind, parsed in chain:
        if kind == "sub_question":
            steps.append(Step(parsed.get("reasoning") or "", parsed.get("question") or ""))
        elif kind in ("self_answer", "sub_query"):
            if not steps:
                raise ValueError(f"a {kind} node has no sub-question above it in its chain")
            open_step = steps.pop()
            steps.append(close_step(open_step, kind, parsed))
    return steps


def close_step(step: Step, kind: str, parsed: Mapping) -> Step:
    """``step`` answered by a self-answer or sub-query node's parsed fields."""
    if kind == "self_answer":
        return Step(step.reasoning, step.question, answer=parsed.get("answer") or "")
    hits = tuple(Hit(h["passage_id"], h["title"], h["text"], float(h["score"])) for h in parsed.get("hits") or [])
    return Step(step.reasoning, step.question, query=parsed.get("query") or "", documents=hits)
