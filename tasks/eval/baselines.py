"""The zero-shot baselines of ReasonRAG's Table 2: naive generation and standard RAG.

ReasonRAG runs them from the FlashRAG reproductions (Appendix E.2), so the prompts are FlashRAG's
(Jin et al. 2024): ``direct`` answers "based on your own knowledge", ``rag`` "based on the given
document" after one retrieval of the question's top-k documents, each as "Doc i(Title: …) text".
The user turn is "Question: …". FlashRAG scores the raw output; a model trained on the tagged
format may still wrap its answer in ``<answer>``, so a tagged answer is taken from inside the
tag. An empty output is an empty prediction and a format error.
"""

from __future__ import annotations

from ragfactory.tasks.eval.inference import (
    EvalQuestion,
    InferenceConfig,
    Outcome,
    ask,
    render_flashrag,
)
from ragfactory.tasks.llm.types import Generator
from ragfactory.tasks.prompts.loader import render_prompt
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.search.common import retrieve
from ragfactory.tasks.search.parsing import find_tag, visible_text

DIRECT, RAG = "direct", "rag"


def free_answer(text: str | None) -> str:
    """The prediction in a free-form output: the ``<answer>`` content if tagged, else the text.

    >>> free_answer("  Steven Spielberg ")
    'Steven Spielberg'
    >>> free_answer("So the answer is <answer>Leah Adler</answer>.")
    'Leah Adler'
    """
    tagged = find_tag(text, "answer")
    return tagged if tagged else visible_text(text)


def _finish(outcome: Outcome, text: str) -> Outcome:
    outcome.prediction = free_answer(text)
    if not outcome.prediction:
        outcome.errors.append("empty output")
    return outcome


async def answer_direct(
    question: EvalQuestion, generator: Generator, retriever: Retriever | None, config: InferenceConfig
) -> Outcome:
    """Naive generation: the question alone, answered from the model's own knowledge."""
    outcome = Outcome()
    completion = await ask(
        generator,
        config,
        question.question_id,
        f"{DIRECT}/0",
        render_prompt("flashrag_direct"),
        f"Question: {question.question}",
        grammar="flashrag_direct",
    )
    return _finish(outcome, outcome.record(completion))


async def answer_rag(
    question: EvalQuestion, generator: Generator, retriever: Retriever | None, config: InferenceConfig
) -> Outcome:
    """Standard RAG: retrieve the top-k documents for the question, then answer from them."""
    if retriever is None:
        raise ValueError("standard RAG needs a retriever")
    outcome = Outcome()
    hits = await retrieve(retriever, question.question, config.top_k)
    outcome.n_retrievals += 1
    completion = await ask(
        generator,
        config,
        question.question_id,
        f"{RAG}/0",
        render_prompt("flashrag_rag", reference=render_flashrag(hits)),
        f"Question: {question.question}",
        grammar="flashrag_rag",
    )
    return _finish(outcome, outcome.record(completion))
