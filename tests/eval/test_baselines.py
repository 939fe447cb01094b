"""The naive-generation and standard-RAG baselines (FlashRAG prompts, as ReasonRAG runs them)."""

from __future__ import annotations

import asyncio
import doctest

import pytest

from ragfactory.tasks.eval import baselines
from ragfactory.tasks.eval.baselines import answer_direct, answer_rag
from ragfactory.tasks.llm.batcher import Batcher
from tests.eval.scenario import CONFIG, QUESTIONS, policy, retriever
from tests.fakes import ScriptedBackend

JAWS = QUESTIONS[0]


def run(answer, reply=policy):
    backend = ScriptedBackend(reply)
    search = retriever()
    outcome = asyncio.run(answer(JAWS, Batcher(backend), search, CONFIG))
    return outcome, [r for batch in backend.batches for r in batch], search


def test_direct_is_one_call_without_retrieval():
    outcome, requests, search = run(answer_direct)
    assert (outcome.prediction, outcome.n_steps, outcome.n_retrievals) == ("I think it is Nobody", 1, 0)
    assert search.batches == []
    [request] = requests
    assert request.messages[0].content.startswith("Answer the question based on your own knowledge.")
    assert request.messages[1].content == "Question: Who directed Jaws?"
    assert request.sampling.stop == () and request.sampling.max_tokens == CONFIG.max_tokens


def test_rag_retrieves_the_question_once_and_answers_from_the_documents():
    outcome, requests, search = run(answer_rag)
    assert (outcome.prediction, outcome.n_steps, outcome.n_retrievals) == ("Spielberg", 1, 1)
    assert search.batches == [["Who directed Jaws?"]]
    system = requests[0].messages[0].content
    assert "The following are given documents.\n\nDoc 1(Title: Jaws) Jaws was directed by" in system


def test_direct_needs_no_retriever_and_rag_does():
    outcome = asyncio.run(answer_direct(JAWS, Batcher(ScriptedBackend(policy)), None, CONFIG))
    assert outcome.n_steps == 1
    with pytest.raises(ValueError, match="retriever"):
        asyncio.run(answer_rag(JAWS, Batcher(ScriptedBackend(policy)), None, CONFIG))


@pytest.mark.parametrize(
    "reply,prediction,errors",
    [
        ("  Steven Spielberg\n", "Steven Spielberg", []),
        ("So the answer is <answer>Steven Spielberg</answer>.", "Steven Spielberg", []),
        ("", "", ["empty output"]),
        ("<think>hmm</think>", "", ["empty output"]),
    ],
)
def test_free_form_predictions(reply, prediction, errors):
    outcome, _, _ = run(answer_direct, reply=lambda r, i: reply)
    assert (outcome.prediction, outcome.errors) == (prediction, errors)


def test_docstring_examples():
    assert doctest.testmod(baselines).failed == 0
