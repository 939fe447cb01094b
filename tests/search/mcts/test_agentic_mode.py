"""ReasonRAG's Reasoning / Grounding / Terminal loop (Algorithm 1) with a scripted model."""

from __future__ import annotations

import asyncio
import doctest
from dataclasses import replace

import pytest

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.search.mcts import steps
from ragfactory.tasks.search.mcts.evaluation import answer_agentic
from ragfactory.tasks.search.mcts.steps import STOP, closed, parse_turn
from tests.eval.scenario import CONFIG, QUESTIONS, policy, retriever
from tests.fakes import FunctionRetriever, ScriptedBackend

JAWS = QUESTIONS[0]


def run(reply, config=CONFIG, search=None, question=JAWS):
    backend = ScriptedBackend(reply)
    search = search or retriever()
    outcome = asyncio.run(answer_agentic(question, Batcher(backend), search, config))
    requests = [request for batch in backend.batches for request in batch]
    return outcome, requests, search


def test_query_evidence_answer_takes_three_rounds_and_one_retrieval():
    outcome, requests, search = run(policy)
    assert outcome.prediction == "Steven Spielberg"
    assert (outcome.n_steps, outcome.n_retrievals, outcome.format_error) == (3, 1, None)
    assert search.batches == [["Jaws director"]]
    assert len(outcome.call_ids) == 3 and all(outcome.call_ids)
    reasoning, grounding, answering = requests
    assert "So the next query is <query>query</query>" in reasoning.messages[0].content
    assert "So the answer is <answer>answer</answer>" in reasoning.messages[0].content
    assert reasoning.messages[1].content == "Question: Who directed Jaws?"
    assert "extract relevant evidence" in grounding.messages[0].content
    assert "Reference: <reference>Wikipedia Title: Jaws\nJaws was directed by Steven Spielberg." in (
        grounding.messages[1].content
    )
    # the thoughts so far, with the tags the stop strings cut closed again
    assert answering.messages[1].content == (
        "Question: Who directed Jaws?\nPrevious Thoughts: I need the director. So the next query is "
        "<query>Jaws director</query> Based on the query, the relevant evidence is "
        "<evidence>Jaws was directed by Steven Spielberg.</evidence>"
    )
    assert all(r.sampling.stop == STOP and r.sampling.max_tokens == 64 for r in requests)
    assert len({r.sampling.seed for r in requests}) == 3


def test_an_answer_in_the_first_round_is_terminal():
    outcome, requests, search = run(lambda r, i: "Easy. So the answer is <answer>Steven Spielberg")
    assert (outcome.prediction, outcome.n_steps, outcome.n_retrievals) == ("Steven Spielberg", 1, 0)
    assert len(requests) == 1 and search.batches == []


@pytest.mark.parametrize("max_rounds", [1, 2, 4])
def test_max_rounds_bounds_a_model_that_never_answers(max_rounds):
    outcome, requests, search = run(
        lambda r, i: "So the next query is <query>Jaws director", config=replace(CONFIG, max_rounds=max_rounds)
    )
    assert len(requests) == outcome.n_steps == max_rounds
    assert outcome.n_retrievals == max_rounds == len(search.batches)
    assert outcome.prediction == ""
    assert outcome.format_error == f"no <answer> in {max_rounds} rounds"


def test_malformed_outputs_are_recorded_and_the_loop_goes_on():
    replies = iter(
        ["", "I am not sure what to do.", "<query>   </query>", "So the answer is <answer>Steven Spielberg</answer>"]
    )
    outcome, requests, search = run(lambda r, i: next(replies))
    assert outcome.prediction == "Steven Spielberg"
    assert (outcome.n_steps, outcome.n_retrievals) == (4, 0)
    assert outcome.errors == [
        "round 0: empty output",
        "round 1: missing <query>, <answer> or <evidence>",
        "round 2: empty <query>",
    ]
    # a malformed output leaves the stage as it was: every round was a Reasoning round
    assert all("question-answering assistant" in r.messages[0].content for r in requests)
    assert search.batches == []


def test_a_grounding_round_without_evidence_stays_in_grounding():
    replies = iter(
        ["<query>Jaws director", "The documents are about films.", "<evidence>Spielberg", "<answer>Steven Spielberg"]
    )
    outcome, requests, _ = run(lambda r, i: next(replies))
    stages = ["grounding" if "extract relevant evidence" in r.messages[0].content else "reasoning" for r in requests]
    assert stages == ["reasoning", "grounding", "grounding", "reasoning"]
    assert outcome.errors == ["round 1: missing <query>, <answer> or <evidence>"]
    assert outcome.prediction == "Steven Spielberg"


def test_an_empty_answer_ends_the_loop_with_an_empty_prediction():
    outcome, _, _ = run(lambda r, i: "So the answer is <answer></answer>")
    assert (outcome.prediction, outcome.n_steps, outcome.errors) == ("", 1, ["round 0: empty <answer>"])


def test_a_query_without_hits_still_counts_as_a_retrieval():
    empty = FunctionRetriever(lambda query, k: [])
    outcome, requests, _ = run(policy, search=empty, config=replace(CONFIG, max_rounds=2))
    assert outcome.n_retrievals == 1 and "<reference></reference>" in requests[1].messages[1].content


@pytest.mark.parametrize(
    "text,action,content,error",
    [
        ("So the next query is <query>Jaws director</query>", "query", "Jaws director", None),
        ("<ANSWER> Paris", "answer", "Paris", None),
        ("<think>maybe <query>x</query></think> <evidence>None</evidence>", "evidence", "None", None),
        ("<answer>Paris</answer> then <query>more</query>", "answer", "Paris", None),
        ("<evidence></evidence>", "evidence", None, "empty <evidence>"),
        ("no tags here", None, None, "missing <query>, <answer> or <evidence>"),
        (None, None, None, "empty output"),
    ],
)
def test_parse_turn(text, action, content, error):
    parsed = parse_turn(text)
    assert (parsed.get("action"), parsed.get("content"), parsed.error) == (action, content, error)


@pytest.mark.parametrize(
    "text,action,expected",
    [
        ("So <query>Jaws director ", "query", "So <query>Jaws director</query>"),
        ("<answer>x</answer>", "answer", "<answer>x</answer>"),
        ("no tag", None, "no tag"),
    ],
)
def test_closed_restores_the_tag_a_stop_string_cut(text, action, expected):
    assert closed(text, action) == expected


def test_agentic_needs_a_retriever():
    with pytest.raises(ValueError, match="retriever"):
        asyncio.run(answer_agentic(JAWS, Batcher(ScriptedBackend(policy)), None, CONFIG))


def test_docstring_examples():
    # the step format's examples (parse_turn), shared with the MCTS search
    assert doctest.testmod(steps).attempted > 0 and doctest.testmod(steps).failed == 0
