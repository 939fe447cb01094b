"""Malformed or empty outputs become format-error nodes; their questions still finish."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.types import Request
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.decex.expansion import DecExConfig, expand_question
from ragfactory.tasks.search.decex.exports import preference_pairs, sft_examples
from tests.fakes import FixedRetriever, ScriptedBackend

CONFIG = DecExConfig(k=2, n_rollouts=2, t_max=2, termination_samples=3, rollout_max_turns=2)
PARIS = Hit("p-paris", "Paris", "Paris is the capital of France.", 1.0)


def prompt_kind(request: Request) -> str:
    prompt = request.messages[0].content
    if len(request.messages) > 1:
        return "rollout"
    if "Please judge based on the available information" in prompt:
        return "termination"
    if "break down the original question" in prompt:
        return "sub_question"
    if prompt.startswith("We will provide you with a question, please answer"):
        return "self_answer"
    if "Please generate a query for search engines" in prompt:
        return "sub_query"
    return "rollout"


SANE = {
    "termination": "<reasoning>Not yet.</reasoning> <question>Which country?</question>",
    "sub_question": "Think. <question>Which country is it?</question>",
    "self_answer": "<answer>France</answer>",
    "sub_query": "capital of France",
    "rollout": "<answer> Paris </answer>",
}


def history_ends_with_self_answer(request: Request) -> bool:
    return request.messages[-1].content.split("### Your Output")[0].rstrip().endswith("Answer: France")


def policy(broken: str | None, bad_text: str):
    """A sane policy whose outputs for the prompt kind ``broken`` (or all: "all") are ``bad_text``."""

    def reply(request: Request, sample: int) -> str:
        kind = prompt_kind(request)
        if broken in (kind, "all") or "broken" in request.messages[0].content:
            return bad_text
        if kind == "sub_question":
            return SANE[kind].replace("country", f"country {sample}")
        if kind == "rollout" and history_ends_with_self_answer(request):
            return "<answer> France </answer>"  # from memory the policy gets it wrong: retrieve
        return SANE[kind]

    return reply


def run(reply, questions):
    batcher = Batcher(ScriptedBackend(reply))
    retriever = FixedRetriever(default=[PARIS])

    async def main():
        jobs = [lambda q=q: expand_question(q, batcher, retriever, CONFIG, "run", 3) for q in questions]
        return await batcher.run_all(jobs, max_in_flight=len(jobs))

    return asyncio.run(main())


QUESTION = {"question_id": "q1", "question": "What is the capital of France?", "golden_answers": ["Paris"]}


@pytest.mark.parametrize("bad_text,error", [("", "empty output"), ("I cannot help with that.", None)])
@pytest.mark.parametrize("broken", ["termination", "sub_question", "self_answer", "rollout", "all"])
def test_malformed_outputs_are_format_error_nodes(broken, bad_text, error):
    [tree] = run(policy(broken, bad_text), [QUESTION])
    rows = tree.node_rows()
    kinds = {"all": {"termination", "sub_question"}, "rollout": {"rollout_leaf"}}.get(broken, {broken})
    bad = [r for r in rows if r["kind"] in kinds]
    assert bad and all(r["is_format_error"] for r in bad)
    assert all(r["format_error"] == error or (error is None and r["format_error"].startswith("missing")) for r in bad)
    assert all(r["value"] is None for r in bad if r["kind"] != "rollout_leaf")
    assert all(r["reward"] == 0.0 for r in bad if r["kind"] == "rollout_leaf")
    good = [r for r in rows if r["kind"] not in kinds | {"question", "answer"}]
    assert not any(r["is_format_error"] for r in good)
    sft_examples(rows, [QUESTION])
    preference_pairs(rows, [QUESTION])


@pytest.mark.parametrize("broken", ["sub_question", "all"])
def test_no_valid_sub_question_ends_the_tree_after_its_layer(broken):
    """With nothing to follow, one final vote asks for the answer; a scripted policy that
    ignores the grammar still writes a sub-question (or nothing), so no answer closes it."""
    [tree] = run(policy(broken, ""), [QUESTION])
    rows = {r["path"]: r for r in tree.node_rows()}
    assert set(rows) == {"q", "q/t0", "q/t1", "q/t2", "q/s0", "q/s1", "q/f0"}
    assert json.loads(rows["q/f0"]["parsed"])["final"] is True
    assert not rows["q/f0"]["is_selected"]
    assert rows["q/f0"]["is_format_error"] == (broken == "all")


def test_a_tree_without_an_answer_at_t_max_samples_the_final_answer():
    """Every termination vote continues, up to T_max = 2; the final vote (path q/s0/e0/s0/e0/f,
    held to <answer> by its grammar) closes the tree: Paris scores F1 1.0 and is kept."""

    def reply(request: Request, sample: int) -> str:
        if dict(request.tags)["path"].endswith("/f"):
            assert "answer\n" in request.sampling.grammar.text.split("start:")[1].split("decision")[0]
            return "<reasoning>The documents say Paris.</reasoning> <answer>Paris</answer>"
        return policy(None, "")(request, sample)

    [tree] = run(reply, [QUESTION])
    rows = {r["path"]: r for r in tree.node_rows()}
    final = [p for p in rows if p.endswith("/f0")]
    assert final == ["q/s0/e0/s0/e0/f0"]
    answer = rows["q/s0/e0/s0/e0/a0"]
    assert answer["kind"] == "answer" and answer["is_selected"] and answer["value"] == 1.0
    assert json.loads(answer["parsed"])["termination_node_ids"] == [rows[final[0]]["node_id"]]


def test_empty_sub_queries_fall_back_to_the_best_self_answer():
    [tree] = run(policy("sub_query", "   "), [QUESTION])
    rows = {r["path"]: r for r in tree.node_rows()}
    assert rows["q/s0/e0"]["format_error"] == "empty query" and rows["q/s0/e0"]["passage_ids"] == []
    assert rows["q/s0/w0"]["is_selected"]  # France scores 0 < 0.75, but it is all there is
    assert json.loads(rows["q/s0"]["parsed"])["retrieval_decision"] == "retrieve"


def test_a_broken_question_finishes_beside_a_sane_one():
    broken = {**QUESTION, "question_id": "q2", "question": "broken question"}
    sane, bad = run(policy(None, ""), [QUESTION, broken])
    assert sane.question_id == "q1" and bad.question_id == "q2"
    assert any(r["kind"] == "sub_query" for r in sane.node_rows())
    assert all(r["is_format_error"] for r in bad.node_rows() if r["kind"] != "question")


@pytest.mark.parametrize("missing", ["question_id", "question", "golden_answers"])
def test_a_question_row_without_a_field_is_refused_by_name(missing):
    row = {k: v for k, v in QUESTION.items() if k != missing}
    with pytest.raises(ValueError, match=missing):
        run(policy(None, ""), [row])


def test_min_iterations_skips_the_vote_before_the_first_step():
    """A policy that always answers at once: with min_iterations = 1 the root state has no
    termination vote and expands a sub-question; the next state votes and closes with Paris."""

    def eager(request: Request, sample: int) -> str:
        if prompt_kind(request) == "termination":
            return "<reasoning>I know it.</reasoning> <answer>Paris</answer>"
        return policy(None, "")(request, sample)

    [at_once] = run(eager, [QUESTION])
    assert {r["path"] for r in at_once.node_rows()} == {"q", "q/t0", "q/t1", "q/t2", "q/a0"}
    batcher = Batcher(ScriptedBackend(eager))
    config = replace(CONFIG, min_iterations=1)
    tree = asyncio.run(expand_question(QUESTION, batcher, FixedRetriever(default=[PARIS]), config, "run", 3))
    rows = {r["path"]: r for r in tree.node_rows()}
    assert not any(p.startswith("q/t") for p in rows)
    assert rows["q/s0"]["is_selected"] and rows["q/s0/e0/t0"]["kind"] == "termination"
    assert rows["q/s0/e0/a0"]["is_selected"] and rows["q/s0/e0/a0"]["value"] == 1.0
    with pytest.raises(ValueError, match="min_iterations"):
        replace(CONFIG, min_iterations=-1)
