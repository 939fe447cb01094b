"""R3-RAG cold start on one question with a scripted policy and judges, worked by hand (§3.2-3.3).

Config: 3 attempts, top_k 1, max_iterations 5, λ_T: correct 0.6, incorrect −0.2, fail −0.1.
Gold "Steven Spielberg". The retriever ranks the cast page over the director page for "Jaws
cast" and the reverse for "Jaws director"; the relevance judge gives the director page 0.8 and
the cast page 0.3; the outcome judge says "no" to "Bob".

- attempt 0 (greedy): query "Jaws cast" (cast page), then answers "Bob": not a match, the judge
  says no: incorrect, 2 steps.
- attempt 1: "Jaws cast" (cast page), "Jaws cast" again (the cast page is seen, so the next
  one: the director page), then "Steven Spielberg": correct by match, 3 steps.
- attempt 2: "Jaws director" (director page), then "Steven Spielberg": correct, 2 steps.

Best-of-N keeps attempt 2 (correct, fewest steps). Rewards per step (process = relevance +
format, scaled = process · λ_T):
  a0 s1: relevance 0.3, format 0, process 0.3, scaled 0.3 · −0.2 = −0.06; s2 (answer): 0, 0.
  a1 s1: 0.3 → 0.3 · 0.6 = 0.18; s2: 0.8 → 0.48; s3 (answer): 0.
  a2 s1: 0.8 → 0.48; s2 (answer): 0.
Outcome rewards: a0 0 (the judge's call), a1 1, a2 1 (matches: no judge call).
Requests: policy 2 + 3 + 2 = 7, relevance 4, outcome 1 = 12.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ragfactory.tasks.prompts.loader import render_prompt
from ragfactory.tasks.search.r3.config import R3Config
from ragfactory.tasks.search.r3.exports import r3_sft_examples
from tests.search.r3.r3_scenario import CONFIG, QUESTION, policy, run


def test_three_attempts_by_hand():
    backend, tree, rewards = run()
    by_path = {n.path: n for n in tree.nodes}
    assert sorted(by_path) == ["q", "q/a0", "q/a0/s2", "q/a1", "q/a1/s2", "q/a1/s2/s3", "q/a2", "q/a2/s2"]
    outcomes = {p: (n.parsed["outcome"], n.parsed["reason"], n.is_selected) for p, n in by_path.items() if p != "q"}
    assert outcomes == {
        "q/a0": ("incorrect", "incorrect", False),
        "q/a0/s2": ("incorrect", "incorrect", False),
        "q/a1": ("correct", "longer than the kept trajectory", False),
        "q/a1/s2": ("correct", "longer than the kept trajectory", False),
        "q/a1/s2/s3": ("correct", "longer than the kept trajectory", False),
        "q/a2": ("correct", "kept", True),
        "q/a2/s2": ("correct", "kept", True),
    }
    assert by_path["q"].parsed["kept_attempt"] == 2
    _, tied, _ = run(
        lambda request, sample: (
            "The problem analysis: x\nThe final answer: Steven Spielberg"
            if dict(request.tags)["path"] in ("q/a0", "q/a1") and request.role == "policy"
            else policy(request, sample)
        )
    )
    assert {n.path: n.parsed["reason"] for n in tied.nodes if n.depth == 1} == {
        "q/a0": "kept",
        "q/a1": "as short as the kept trajectory, an earlier attempt",
        "q/a2": "longer than the kept trajectory",
    }
    assert [by_path[p].passage_ids for p in ("q/a0", "q/a1", "q/a1/s2", "q/a2")] == [
        ["p-cast"],
        ["p-cast"],
        ["p-director"],
        ["p-director"],
    ]
    assert {p: n.kind for p, n in by_path.items()} == {
        "q": "question",
        "q/a0": "sub_query",
        "q/a0/s2": "answer",
        "q/a1": "sub_query",
        "q/a1/s2": "sub_query",
        "q/a1/s2/s3": "answer",
        "q/a2": "sub_query",
        "q/a2/s2": "answer",
    }
    assert [by_path[p].parsed["temperature"] for p in ("q/a0", "q/a1", "q/a2")] == [0.0, 0.7, 0.7]
    path_of = {n.node_id: n.path for n in tree.nodes}
    table = {
        (path_of[r["node_id"]], r["name"]): (round(r["value"], 6), r["scaled"] and round(r["scaled"], 6))
        for r in rewards
    }
    assert table == {
        ("q/a0", "relevance"): (0.3, None),
        ("q/a0", "format"): (0.0, None),
        ("q/a0", "process"): (0.3, -0.06),
        ("q/a0/s2", "format"): (0.0, None),
        ("q/a0/s2", "process"): (0.0, -0.0),
        ("q/a0/s2", "outcome"): (0.0, None),
        ("q/a1", "relevance"): (0.3, None),
        ("q/a1", "format"): (0.0, None),
        ("q/a1", "process"): (0.3, 0.18),
        ("q/a1/s2", "relevance"): (0.8, None),
        ("q/a1/s2", "format"): (0.0, None),
        ("q/a1/s2", "process"): (0.8, 0.48),
        ("q/a1/s2/s3", "format"): (0.0, None),
        ("q/a1/s2/s3", "process"): (0.0, 0.0),
        ("q/a1/s2/s3", "outcome"): (1.0, None),
        ("q/a2", "relevance"): (0.8, None),
        ("q/a2", "format"): (0.0, None),
        ("q/a2", "process"): (0.8, 0.48),
        ("q/a2/s2", "format"): (0.0, None),
        ("q/a2/s2", "process"): (0.0, 0.0),
        ("q/a2/s2", "outcome"): (1.0, None),
    }
    scales = {path_of[r["node_id"]]: r["scale"] for r in rewards if r["name"] == "process"}
    assert scales == {
        "q/a0": -0.2,
        "q/a0/s2": -0.2,
        "q/a1": 0.6,
        "q/a1/s2": 0.6,
        "q/a1/s2/s3": 0.6,
        "q/a2": 0.6,
        "q/a2/s2": 0.6,
    }
    judged = [path_of[r["node_id"]] for r in rewards if r["llm_call_id"]]
    assert sorted(judged) == ["q/a0", "q/a0/s2", "q/a1", "q/a1/s2", "q/a2"]  # 4 relevance + Bob's outcome
    assert sum(len(batch) for batch in backend.batches) == 12
    assert not any(r["is_format_error"] for r in rewards)


def test_the_sft_rows_are_algorithm_2_of_the_kept_trajectory():
    _, tree, _ = run()
    rows = r3_sft_examples(tree.node_rows(), [QUESTION])
    first = render_prompt("r3_first", question="Who directed Jaws?")
    steps = (
        "Step 1:\nThe problem analysis: Step 1 of a2.\nThe retrieval query: Jaws director\n"
        "The retrieval documents:\n(1) Jaws: Jaws was directed by Steven Spielberg."
    )
    second = render_prompt("r3_next", question="Who directed Jaws?", steps=steps)
    assert [r["messages"] for r in rows] == [
        [
            {"role": "user", "content": first},
            {"role": "assistant", "content": "The problem analysis: Step 1 of a2.\nThe retrieval query: Jaws director"},
        ],
        [
            {"role": "user", "content": second},
            {"role": "assistant", "content": "The problem analysis: Step 2 of a2.\nThe final answer: Steven Spielberg"},
        ],
    ]
    by_id = {n.node_id: n.path for n in tree.nodes}
    assert [[by_id[i] for i in r["node_ids"]] for r in rows] == [["q/a2"], ["q/a2", "q/a2/s2"]]
    assert second.endswith("The question: Who directed Jaws?. The Previous Steps:" + steps + "\n#### Output:\n")


def test_an_unreadable_verdict_is_a_format_error_scored_0_and_the_question_finishes():
    def mumbling(request, sample):
        path = dict(request.tags)["path"]
        if path == "q/a2/r" or path.endswith("/o"):
            return "I think the documents are quite relevant."
        return policy(request, sample)

    _, tree, rewards = run(mumbling)
    path_of = {n.node_id: n.path for n in tree.nodes}
    bad = {(path_of[r["node_id"]], r["name"]): (r["value"], r["error"]) for r in rewards if r["is_format_error"]}
    assert bad == {
        ("q/a2", "relevance"): (0.0, "no readable 'So the relevance is' verdict"),
        ("q/a0/s2", "outcome"): (0.0, "no readable 'So the predicted answer is correct' verdict"),
    }
    process = {path_of[r["node_id"]]: round(r["scaled"], 6) for r in rewards if r["name"] == "process"}
    assert process["q/a2"] == 0.0 and process["q/a1/s2"] == 0.48
    assert {n.path for n in tree.nodes if n.is_selected} == {"q", "q/a2", "q/a2/s2"}


def test_a_malformed_step_and_a_trajectory_that_never_answers():
    """a0's second step is malformed: λ_T 1, its format reward −1 unscaled; a1 queries at every
    step up to max_iterations 2: a failure, λ_T −0.1; a2 as above."""

    def broken(request, sample):
        path = dict(request.tags)["path"]
        if path == "q/a0/s2":
            return "Spielberg, I think."
        if path == "q/a1/s2":
            return "The problem analysis: More.\nThe retrieval query: Jaws cast"
        return policy(request, sample)

    _, tree, rewards = run(broken, replace(CONFIG, max_iterations=2))
    by_path = {n.path: n for n in tree.nodes}
    assert by_path["q/a0/s2"].is_format_error and by_path["q/a0/s2"].parsed["outcome"] == "format"
    assert by_path["q/a1/s2"].parsed["outcome"] == "fail" and by_path["q/a1/s2"].is_leaf
    path_of = {n.node_id: n.path for n in tree.nodes}
    process = {
        path_of[r["node_id"]]: (r["value"], r["scale"], round(r["scaled"], 6))
        for r in rewards
        if r["name"] == "process"
    }
    assert process["q/a0"] == (0.3, 1.0, 0.3) and process["q/a0/s2"] == (-1.0, 1.0, -1.0)
    assert process["q/a1"] == (0.3, -0.1, -0.03) and process["q/a1/s2"] == (0.8, -0.1, -0.08)
    assert json.loads(json.dumps(by_path["q"].parsed))["kept_attempt"] == 2


def test_min_queries_and_answer_at_limit_hold_steps_to_a_query_or_an_answer():
    seen = []

    def spy(request, sample):
        if request.role == "policy":
            seen.append((dict(request.tags)["path"], request.sampling.grammar.name))
        return policy(request, sample)

    run(spy, replace(CONFIG, min_queries=1))
    assert sorted(seen) == [
        ("q/a0", "r3_query"),
        ("q/a0/s2", "r3_step"),
        ("q/a1", "r3_query"),
        ("q/a1/s2", "r3_step"),
        ("q/a1/s2/s3", "r3_step"),
        ("q/a2", "r3_query"),
        ("q/a2/s2", "r3_step"),
    ]
    seen.clear()
    run(spy, replace(CONFIG, max_iterations=2, answer_at_limit=True))
    assert sorted(seen) == [
        ("q/a0", "r3_step"),
        ("q/a0/s2", "r3_answer"),
        ("q/a1", "r3_step"),
        ("q/a1/s2", "r3_answer"),
        ("q/a2", "r3_step"),
        ("q/a2/s2", "r3_answer"),
    ]
    with pytest.raises(ValueError, match="min_queries must be in"):
        R3Config(max_iterations=2, min_queries=2)
