"""R3-RAG's inference as an evaluation mode: the step loop its cold-start SFT data trains.

The model sees R3's step prompt (Fig. 6 for the first step, Fig. 7 with the earlier steps and
their documents after it, ``steps.py``), held to the ``r3_step`` grammar, and writes "The
problem analysis: ..." then a retrieval query or the final answer. A query retrieves the top-k
passages the question has not seen yet (as the build's attempts do); an answer ends the loop with
its prediction; a step with neither is a format error that ends it with none, as Algorithm 1 ends
a trajectory. At most ``max_rounds`` steps. ``MODES`` adds the loop to the evaluation as its
``r3`` mode (``tasks/eval/runner.py``); this module belongs to the evaluation part.
"""

from __future__ import annotations

from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig, Outcome, ask, step_loop
from ragfactory.tasks.llm.types import Generator
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.search.parsing import Parsed
from ragfactory.tasks.search.r3.config import STRATEGY, R3Config
from ragfactory.tasks.search.r3.expansion import retrieve_unseen
from ragfactory.tasks.search.r3.steps import Step, parse_step, step_prompt

MODE = STRATEGY
GRAMMAR = "r3_step"
DOC_CHARS = R3Config().doc_chars  # the documents' length in the prompts the exports train on


async def answer_r3(
    question: EvalQuestion, generator: Generator, retriever: Retriever | None, config: InferenceConfig
) -> Outcome:
    """R3's step loop on one question; the outcome counts its steps and retrievals."""
    if retriever is None:
        raise ValueError("r3 inference needs a retriever")
    steps: list[Step] = []
    seen: set[str] = set()

    def ask_turn(number: int):
        prompt = step_prompt(question.question, steps, DOC_CHARS)
        return ask(generator, config, question.question_id, f"{MODE}/{number}", None, prompt, (), GRAMMAR)

    async def search(text: str, turn: Parsed) -> None:
        fresh = await retrieve_unseen(retriever, turn.get("content"), config.top_k, seen)
        steps.append(Step(turn.get("analysis"), query=turn.get("content"), docs=tuple(fresh)))

    return await step_loop(config, ask_turn, parse_step, search, answer_field="content")


MODES = {MODE: answer_r3}
GRAMMARS = {MODE: (GRAMMAR,)}  # what holds each step (``tasks/eval/inference.py`` checks max_tokens)
