"""ReasonRAG's agentic RAG inference: the Reasoning / Grounding / Terminal loop (§2.4).

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

The step format (the user turn of each stage, the stop strings, how an output reads) is
``steps.py``, shared with the search in this folder that builds ReasonRAG's training data; each
stage's output grammar (``reasonrag_reasoning.lark``: a query or an answer;
``reasonrag_grounding.lark``: the evidence) holds a constrained model to that form. ``MODES``
adds this loop to the evaluation as its ``agentic`` mode (``tasks/eval/runner.py``); this module
belongs to the evaluation part: the strategy names it (``plugin.py``), the runner loads it.
"""

from __future__ import annotations

from ragfactory.tasks.eval.inference import (
    EvalQuestion,
    InferenceConfig,
    Outcome,
    ask,
)
from ragfactory.tasks.llm.types import Generator
from ragfactory.tasks.prompts.loader import render_prompt
from ragfactory.tasks.retrieval.types import Hit, Retriever
from ragfactory.tasks.search.common import retrieve
from ragfactory.tasks.search.mcts.steps import (
    GROUNDING,
    REASONING,
    STOP,
    closed,
    grounding_input,
    parse_turn,
    reasoning_input,
)

MODE = "agentic"
REASONING_GRAMMAR, GROUNDING_GRAMMAR = "reasonrag_reasoning", "reasonrag_grounding"


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
        grammar = REASONING_GRAMMAR if stage == REASONING else GROUNDING_GRAMMAR
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


MODES = {MODE: answer_agentic}
# The output grammars that hold the loop's answers (``tasks/eval/inference.py`` checks
# ``max_tokens`` against them before any question is asked).
GRAMMARS = {MODE: (REASONING_GRAMMAR, GROUNDING_GRAMMAR)}
