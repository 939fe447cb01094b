"""TreePS-RAG's inference as an evaluation mode: the step loop its trajectories train.

The expansion grows a tree of chats (``expansion.py``): the step prompt as the user turn, each
step an assistant turn, each search's ``<information>`` a user turn; the ``trajectories``
export trains a root-to-leaf path of that chat (``tasks/training/tree_advantage.py``). So the
model continues that chat, held to the ``treeps_step`` grammar and stopped at its action, as a
tree's child is sampled: ``<reason>…</reason>`` then a ``<search>``, answered with the top-k
passages as the next user turn, or an ``<answer>`` that ends the loop with its prediction. A
step with neither is a format error that ends it with none (a malformed leaf of the tree). At
most ``max_rounds`` steps (the tree's depth D is 4). ``MODES`` adds the loop to the evaluation
as its ``treeps`` mode (``tasks/eval/runner.py``); this module belongs to the evaluation part.
"""

from __future__ import annotations

from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig, Outcome, ask_chat, step_loop
from ragfactory.tasks.llm.types import Generator, Message
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.search.common import hit_record, retrieve
from ragfactory.tasks.search.parsing import Parsed
from ragfactory.tasks.search.treeps.config import STRATEGY, TreePSConfig
from ragfactory.tasks.search.treeps.steps import STEP_STOP, closed_step, initial_prompt, parse_step, step_turns

MODE = STRATEGY
PROMPT = TreePSConfig().prompt  # the step prompt the build's trees and their exports use


async def answer_treeps(
    question: EvalQuestion, generator: Generator, retriever: Retriever | None, config: InferenceConfig
) -> Outcome:
    """TreePS's step loop on one question; the outcome counts its steps and retrievals."""
    if retriever is None:
        raise ValueError("treeps inference needs a retriever")
    turns = [Message("user", initial_prompt(question.question, PROMPT))]

    def ask_turn(number: int):
        path = f"{MODE}/{number}"
        return ask_chat(generator, config, question.question_id, path, turns, STEP_STOP, PROMPT)

    async def search(text: str, step: Parsed) -> None:
        hits = await retrieve(retriever, step.get("query"), config.top_k)
        turns.extend(step_turns(closed_step(text, "search"), [hit_record(hit) for hit in hits]))

    return await step_loop(config, ask_turn, lambda text: parse_step(text, PROMPT), search)


MODES = {MODE: answer_treeps}
GRAMMARS = {MODE: (PROMPT,)}  # what holds each step (``tasks/eval/inference.py`` checks max_tokens)
