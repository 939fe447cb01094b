"""DecEx-RAG's inference as an evaluation mode: the step loop its SFT and DPO exports train.

The exports (``exports.py``, §2.3) train on the rollout prompt (Table 8) with the steps so far as
its "Previous Iteration", and on the next steps in ``history.py``'s rendering up to and including
the next ``<search>``, or the final answer. So the model sees that prompt, held to the
``decex_rollout`` grammar, and writes a step ("Step i:", its thinking, "Sub-question: …", then
``<search> query </search>``, or "Answer: …" lines of steps it answers itself before one); a
search is answered with the top-k documents (as the build's sub-queries are), the steps it wrote
join the history with those documents, and the loop goes on. An ``<answer>`` ends it with its
prediction; a turn with neither is a format error that ends it with none, as a rollout ends. At
most ``max_rounds`` turns. A step written without the "Sub-question:" line joins the history with
its query as its sub-question. ``MODES`` adds the loop to the evaluation as its ``decex`` mode
(``tasks/eval/runner.py``); this module belongs to the evaluation part.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig, Outcome, ask, step_loop
from ragfactory.tasks.llm.types import Generator
from ragfactory.tasks.retrieval.types import Hit, Retriever
from ragfactory.tasks.search.common import retrieve
from ragfactory.tasks.search.decex.config import STRATEGY
from ragfactory.tasks.search.decex.history import Step, rollout_prompt
from ragfactory.tasks.search.parsing import ROLLOUT_STOP, Parsed, parse_rollout_turn

MODE = STRATEGY
GRAMMAR = "decex_rollout"
_STEP = re.compile(r"(?:\A|\n)Step \d+:\n")
_SUB_QUESTION, _ANSWER = "Sub-question: ", "Answer: "


async def answer_decex(
    question: EvalQuestion, generator: Generator, retriever: Retriever | None, config: InferenceConfig
) -> Outcome:
    """DecEx's step loop on one question; the outcome counts its turns and retrievals."""
    if retriever is None:
        raise ValueError("decex inference needs a retriever")
    steps: list[Step] = []

    def ask_turn(number: int):
        prompt = rollout_prompt(question.question, steps)
        return ask(generator, config, question.question_id, f"{MODE}/{number}", None, prompt, ROLLOUT_STOP, GRAMMAR)

    async def search(text: str, turn: Parsed) -> None:
        hits = await retrieve(retriever, turn.get("query"), config.top_k)
        steps.extend(written_steps(text, turn.get("query"), hits))

    return await step_loop(config, ask_turn, parse_rollout_turn, search)


def written_steps(text: str, query: str, hits: Sequence[Hit]) -> list[Step]:
    """The steps a searching turn wrote, as ``history.py`` renders them: each "Step i:" block's
    thinking, sub-question and "Answer:" line; the last one's search answered by ``hits``."""
    head = text[: text.index("<search>")] if "<search>" in text else text
    blocks = [b.strip("\n") for b in _STEP.split(head.rstrip())]
    blocks = [b for b in blocks[1:] if b] if blocks[0].strip() == "" else blocks
    steps = [_answered_step(block) for block in blocks[:-1]]
    reasoning, sub_question, _ = _read_block(blocks[-1] if blocks else "")
    if sub_question is None:  # no "Sub-question:" line: the query stands for it
        reasoning, sub_question = " ".join(reasoning.split()), query
    return [*steps, Step(reasoning, sub_question, query=query, documents=tuple(hits))]


def _answered_step(block: str) -> Step:
    reasoning, sub_question, answer = _read_block(block)
    return Step(reasoning, sub_question or "", answer=answer)


def _read_block(block: str) -> tuple[str, str | None, str | None]:
    """(thinking, sub-question or None, answer or None) of one step's lines."""
    lines = block.split("\n")
    at = next((i for i, line in enumerate(lines) if line.startswith(_SUB_QUESTION)), None)
    if at is None:
        return block, None, None
    answer = next((line[len(_ANSWER) :] for line in lines[at + 1 :] if line.startswith(_ANSWER)), None)
    return "\n".join(lines[:at]), lines[at][len(_SUB_QUESTION) :], answer


MODES = {MODE: answer_decex}
GRAMMARS = {MODE: (GRAMMAR,)}  # what holds each turn (``tasks/eval/inference.py`` checks max_tokens)
