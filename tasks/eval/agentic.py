"""ReasonRAG's agentic RAG inference: the Reasoning / Grounding / Terminal loop (001, §2.4).

Algorithm 1, for at most ``max_rounds`` rounds (its N):

- in the *Reasoning* stage the model sees the question and every earlier output (the system
  prompt of Figure 12) and ends with ``<query>`` or ``<answer>``;
- in the *Grounding* stage it also sees the documents the last query retrieved (Figure 13) and
  extracts ``<evidence>``;
- after each output: a ``<query>`` retrieves the top-k documents and moves to Grounding, an
  ``<answer>`` ends the loop (*Terminal*) with that answer, an ``<evidence>`` returns to
  Reasoning. An output with none of the three leaves the stage as it is (the algorithm has no
  branch for it) and is recorded as a format error; so is an empty tag. A loop that runs out of
  rounds has no answer: its prediction is empty.

The user turn follows the authors' released pipeline: "Question: …", then "Previous Thoughts:"
with the earlier outputs joined by spaces, and for Grounding the documents under "Reference:"
as "Wikipedia Title: …" blocks. Generation stops at the closing tags (as that pipeline does); the
tag the stop string cut is closed again before the output joins the thoughts. When an output
holds several of the tags the first one decides, which with those stop strings is the only one.
Each stage's output grammar (``reasonrag_reasoning.lark``: a query or an answer;
``reasonrag_grounding.lark``: the evidence) holds a constrained model to that form.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragfactory.tasks.eval.inference import (
    EvalQuestion,
    InferenceConfig,
    Outcome,
    ask,
    render_wikipedia,
    retrieve,
)
from ragfactory.tasks.llm.types import Generator
from ragfactory.tasks.prompts.loader import render_prompt
from ragfactory.tasks.retrieval.types import Hit, Retriever
from ragfactory.tasks.search.parsing import Parsed, tag_span, visible_text

MODE = "agentic"
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
    spans = {tag: tag_span(body, tag) for tag in ACTION_TAGS}
    present = sorted((span[0], tag) for tag, span in spans.items() if span is not None)
    if not present:
        error = "missing <query>, <answer> or <evidence>" if body else "empty output"
        return Parsed({"action": None, "content": None}, error)
    tag = present[0][1]
    content = spans[tag][1]
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


async def answer_agentic(
    question: EvalQuestion, generator: Generator, retriever: Retriever | None, config: InferenceConfig
) -> Outcome:
    """Algorithm 1 on one question; the outcome counts its rounds and retrievals."""
    if retriever is None:
        raise ValueError("agentic inference needs a retriever")
    outcome, stage = Outcome(), REASONING
    thoughts: list[str] = []
    docs: list[Hit] = []
    reasoning_system = render_prompt("reasonrag_reasoning", answer_format=config.answer_format)
    grounding_system = render_prompt("reasonrag_grounding")
    for round_index in range(config.max_rounds):
        if stage == REASONING:
            system, user = reasoning_system, reasoning_input(question.question, thoughts)
        else:
            system, user = grounding_system, grounding_input(question.question, thoughts, docs)
        path = f"{MODE}/{round_index}"
        grammar = "reasonrag_reasoning" if stage == REASONING else "reasonrag_grounding"
        completion = await ask(generator, config, question.question_id, path, system, user, STOP, grammar)
        text = outcome.record(completion)
        turn = parse_turn(text)
        action, content = turn.get("action"), turn.get("content")
        thoughts.append(closed(text, action))
        if turn.error:
            outcome.errors.append(f"round {round_index}: {turn.error}")
        if action == "answer":
            outcome.prediction = content or ""
            return outcome
        if action == "query" and content:
            docs = await retrieve(retriever, content, config.top_k)
            outcome.n_retrievals += 1
            stage = GROUNDING
        elif action == "evidence":
            stage = REASONING
    outcome.errors.append(f"no <answer> in {config.max_rounds} rounds")
    return outcome
