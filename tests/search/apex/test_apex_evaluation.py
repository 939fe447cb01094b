"""APEX-Searcher's plan-then-execute inference as the ``apex`` evaluation mode, with the scripted
Jaws model of ``apex_scenario.py``: its plan runs through Algorithm 2 as a build's execution does,
and the outcome counts the calls, searches and format errors worked out below by hand."""

from __future__ import annotations

import asyncio

from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig, check_max_tokens, mode_grammars
from ragfactory.tasks.eval.runner import eval_modes
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.search.apex.evaluation import answer_apex
from ragfactory.tasks.search.apex.plan_format import PLAN_STOP
from tests.fakes import FixedRetriever, ScriptedBackend
from tests.search.apex.apex_scenario import PLANS, QUESTION, RETRIEVAL, apex_reply

JAWS = EvalQuestion("jaws", QUESTION["question"], tuple(QUESTION["golden_answers"]))
GOOD_PLAN = PLANS[1]  # "1. Who directed Jaws?" "2. Who is the mother of #1?"


def run(plan: str, config: InferenceConfig, fallback: dict[str, str] | None = None):
    """The mode on the Jaws question with ``plan`` as the planner's output; (outcome, prompts,
    retriever). ``fallback`` answers the prompts about the question itself, by call."""

    def reply(request, sample):
        prompt = request.messages[0].content
        if prompt.startswith("You are a planning agent"):
            assert request.sampling.stop == PLAN_STOP and request.sampling.grammar.name == "apex_plan"
            return plan
        if fallback and f"### Sub-question\n{JAWS.question}" in prompt:
            return fallback["sufficiency" if "Decide whether" in prompt else "answer"]
        return apex_reply(request, sample)

    backend = ScriptedBackend(reply)
    retriever = FixedRetriever(RETRIEVAL)
    outcome = asyncio.run(answer_apex(JAWS, Batcher(backend), retriever, config))
    return outcome, [r.messages[0].content for batch in backend.batches for r in batch], retriever


def test_the_mode_is_declared_with_the_executors_grammars():
    assert eval_modes()["apex"] is answer_apex
    assert "apex_sufficiency" in mode_grammars()["apex"] and "apex_synthesis" in mode_grammars()["apex"]
    check_max_tokens(["apex"], 96)


def test_a_plan_runs_through_algorithm_2_as_a_build_runs_it():
    # Sub-question 1: sufficiency (unreadable: retrieve, an error), query, continue (stop),
    # sub-answer = 4 calls, 1 search. Sub-question 2, "#1" resolved to Steven Spielberg:
    # sufficiency, query, continue, a second query (its new document Arnold's), continue (stop),
    # sub-answer = 6 calls, 2 searches. The plan and the synthesis: 12 calls, 3 searches.
    outcome, prompts, retriever = run(GOOD_PLAN, InferenceConfig(max_rounds=3, max_tokens=96, top_k=2))
    assert outcome.prediction == "Leah Adler"
    assert (outcome.n_steps, outcome.n_retrievals) == (12, 3)
    assert outcome.errors == ["sufficiency: missing <decision>"]
    assert retriever.batches == [["Jaws director"], ["Steven Spielberg mother"], ["Spielberg parents"]]
    assert (
        prompts[0].startswith("You are a planning agent")
        and "### Sub-question\nWho is the mother of Steven Spielberg?" in prompts[5]
    )
    assert len(outcome.call_ids) == 12


def test_max_rounds_bounds_the_hops_of_each_sub_question():
    # One hop each: sufficiency, query, sub-answer twice, with the plan and the synthesis: 8 calls.
    outcome, _, retriever = run(GOOD_PLAN, InferenceConfig(max_rounds=1, max_tokens=96, top_k=2))
    assert (outcome.prediction, outcome.n_steps, outcome.n_retrievals) == ("Leah Adler", 8, 2)
    assert retriever.batches == [["Jaws director"], ["Steven Spielberg mother"]]


def test_a_malformed_plan_falls_back_to_the_question_as_its_one_step():
    answers = {"sufficiency": "<decision>answer</decision>", "answer": "<answer>Leah Adler</answer>"}
    outcome, prompts, retriever = run(PLANS[2], InferenceConfig(max_rounds=1, max_tokens=96), answers)
    # the plan, the sufficiency check (answer from knowledge), the knowledge answer, the synthesis
    assert (outcome.prediction, outcome.n_steps, outcome.n_retrievals) == ("Leah Adler", 4, 0)
    assert outcome.errors == ["plan: no numbered sub-questions"]
    assert retriever.batches == []
