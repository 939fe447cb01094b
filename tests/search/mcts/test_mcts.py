"""The MCTS strategy on one question with a scripted policy, worked by hand (ReasonRAG, §2.2.2).

Config: 6 iterations, child_limit 2, max_depth 3, c 1, α 0.9, one greedy rollout per step.
Gold answer "Steven Spielberg". The policy: a Reasoning step with no thoughts queries at slot 0
("q/s0") and answers "Bob" at slot 1; a Grounding step writes the same evidence every time; a
Reasoning step after evidence answers "Steven Spielberg" (at depth 3 it is the forced answer).

1. root, slot 0 -> query Q (depth 1). Rollout: evidence (2), answer (3), F1 1: 1 · 0.9³ = 0.729.
2. root, slot 1 -> answer "Bob" (1), F1 0: value 0, terminal.
3. root full; Bob is exhausted, so Q. Q slot 0 -> evidence E1 (2). Rollout: answer (3): 0.729.
4. Q slot 1 -> evidence E2 (2), the same text: 0.729.
5. Q full: E1, E2 both N 1, Q 0.729, same UCT: the first, E1. E1 slot 0 -> answer A1 (3): 0.729.
6. Q: ΣN 3, E1 (N 2) 0.729 + √3/3 = 1.3064 < E2 (N 1) 0.729 + √3/2 = 1.5950 -> E2 -> A2: 0.729.

N: root 6, Q 5, Bob 1, E1 2, E2 2, A1 1, A2 1. Q (value): root (0.729 · 5)/6 = 0.6075, every
other step 0.729 but Bob 0. Requests: 3 + 1 + 2 + 2 + 1 + 1 = 10. Rollouts: from Q, E1, E2.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.mcts.config import MctsConfig
from ragfactory.tasks.search.mcts.expansion import search_question
from ragfactory.tasks.search.mcts.pairs import step_pairs
from ragfactory.tasks.search.strategy import ShardContext
from tests.fakes import FunctionRetriever, ScriptedBackend
from tests.search.mcts.mcts_scenario import CONFIG, QUESTION, policy
from tests.search.mcts.mcts_scenario import search_jaws as _search


def test_six_iterations_by_hand():
    backend = ScriptedBackend(policy)
    tree = _search(backend)
    by_path = {n.path: n for n in tree.nodes}
    assert sorted(by_path) == ["q", "q/s0", "q/s0/s0", "q/s0/s0/s0", "q/s0/s1", "q/s0/s1/s0", "q/s1"]
    kinds = {p: n.kind for p, n in by_path.items()}
    assert kinds == {
        "q": "question",
        "q/s0": "sub_query",
        "q/s1": "answer",
        "q/s0/s0": "evidence",
        "q/s0/s1": "evidence",
        "q/s0/s0/s0": "answer",
        "q/s0/s1/s0": "answer",
    }
    visits = {p: n.visits for p, n in by_path.items()}
    assert visits == {"q": 6, "q/s0": 5, "q/s1": 1, "q/s0/s0": 2, "q/s0/s1": 2, "q/s0/s0/s0": 1, "q/s0/s1/s0": 1}
    values = {p: round(n.value, 4) for p, n in by_path.items()}
    assert values == {
        "q": 0.6075,
        "q/s0": 0.729,
        "q/s1": 0.0,
        "q/s0/s0": 0.729,
        "q/s0/s1": 0.729,
        "q/s0/s0/s0": 0.729,
        "q/s0/s1/s0": 0.729,
    }
    assert backend.calls == 10
    assert sorted(r.node_id for r in tree.rollouts) == sorted(
        by_path[p].node_id for p in ("q/s0", "q/s0/s0", "q/s0/s1")
    )
    assert all(r.f1 == 1.0 for r in tree.rollouts)
    assert by_path["q/s0"].passage_ids == ["p-jaws"]
    assert all(n.is_selected for n in tree.nodes) and not any(n.is_format_error for n in tree.nodes)


def test_the_pairs_of_the_tree():
    tree = _search(ScriptedBackend(policy))
    steps = [
        {"node_id": n.node_id, "parent_id": n.parent_id, "kind": n.kind, "text": n.text, "value": n.value}
        for n in tree.nodes
        if n.kind != "question"
    ]
    by_id = {n.node_id: n.path for n in tree.nodes}
    # the root's query (0.729) over "Bob" (0); E1 and E2 have the same text: no pair under Q
    pairs = step_pairs(steps, min_gap=0.01)
    assert [(by_id[p.chosen], by_id[p.rejected], p.stage, round(p.gap, 3)) for p in pairs] == [
        ("q/s0", "q/s1", "query", 0.729)
    ]


def test_a_malformed_step_is_a_format_error_valued_zero():
    def lost(request, sample):
        return "I am not sure." if dict(request.tags)["path"] == "q/s1" else policy(request, sample)

    tree = _search(ScriptedBackend(lost))
    node = {n.path: n for n in tree.nodes}["q/s1"]
    assert node.is_format_error and node.format_error == "missing <query>, <answer> or <evidence>"
    assert node.value == 0.0 and not node.is_selected  # a dead end: pruned


def test_the_exports_of_the_tree():
    from ragfactory.tasks.search.mcts.exports import mcts_preference_pairs, mcts_sft_examples

    tree = _search(ScriptedBackend(policy))
    rows = tree.table_rows().nodes
    pairs = mcts_preference_pairs(rows, [QUESTION])
    assert len(pairs) == 1 and pairs[0]["decision"] == "query"
    assert pairs[0]["prompt"][1]["content"] == "Question: Who directed Jaws?"
    assert pairs[0]["chosen"][0]["content"] == "So the next query is <query>Jaws director</query>"
    assert pairs[0]["rejected"][0]["content"] == "So the answer is <answer>Bob</answer>"
    sft = mcts_sft_examples(rows, [QUESTION])
    # A1 and A2 both hold 0.729: the first generated (under E1) wins; its path is Q, E1, A1
    assert [len(r["node_ids"]) for r in sft] == [1, 2, 3]
    grounding_user = sft[1]["messages"][1]["content"]
    assert grounding_user.startswith("Question: Who directed Jaws?\nPrevious Thoughts: So the next query is")
    assert "Wikipedia Title: Jaws\nJaws was directed by Steven Spielberg." in grounding_user
    assert sft[2]["messages"][-1]["content"] == "So the answer is <answer>Steven Spielberg</answer>"


def test_min_queries_holds_the_first_step_to_a_query():
    seen = []

    def grammar_spy(request, sample):
        seen.append((dict(request.tags)["path"], request.sampling.grammar.text.splitlines()[0]))
        return policy(request, sample)

    config = MctsConfig(iterations=2, child_limit=2, max_depth=3, c=1.0, alpha=0.9, min_queries=1)
    retriever = FunctionRetriever(lambda q, k: [Hit("p-jaws", "Jaws", "Jaws was directed by Steven Spielberg.", 1.0)])
    context = ShardContext(Batcher(ScriptedBackend(grammar_spy)), retriever, "run-1", 0)
    asyncio.run(search_question(QUESTION, context, config))
    first = [grammar for path, grammar in seen if path in ("q/s0", "q/s1")]
    assert len(first) == 2 and all("before the configured queries" in g for g in first)
    with pytest.raises(ValueError, match="min_queries must be in"):
        MctsConfig(max_depth=3, min_queries=2)


def test_parallel_selections_grow_the_same_tree_in_fewer_engine_calls():
    """Two selections per round, worked by hand with virtual loss (uct.py):

    round 1: the root twice (slots 0 and 1): Q and "Bob" in one engine call, then Q's rollout;
    round 2: the root is full and "Bob" exhausted, so Q twice (slots 0 and 1): E1 and E2 together;
    round 3: Q is full; E1 and E2 tie, so E1 first; the second selection sees E1's visit in
    flight (N 2, Q 0.729 / 2 = 0.3645; ΣN 3): E1 0.3645 + √3/3 = 0.9418 < E2 0.729 + √3/2 = 1.5950,
    so E2: A1 and A2 together. The tree, N and Q are those of the sequential search; the 10
    requests go in 6 engine calls of 2, 1, 1, 2, 2, 2 instead of 10 calls of one.
    """
    sequential = _search(ScriptedBackend(policy))
    backend = ScriptedBackend(policy)
    retriever = FunctionRetriever(lambda q, k: [Hit("p-jaws", "Jaws", "Jaws was directed by Steven Spielberg.", 1.0)])
    context = ShardContext(Batcher(backend), retriever, "run-1", 0)
    parallel = asyncio.run(search_question(QUESTION, context, replace(CONFIG, parallel_selections=2)))
    assert [len(batch) for batch in backend.batches] == [2, 1, 1, 2, 2, 2]
    stats = lambda tree: sorted((n.node_id, n.text, n.visits, round(n.value, 6)) for n in tree.nodes)  # noqa: E731
    assert stats(parallel) == stats(sequential)


def pruning_policy(request, sample: int) -> str:
    """The root's second query ("Jaws cast") leads to documents the Grounding step cannot read."""
    system, user = request.messages[0].content, request.messages[1].content
    if "extract relevant evidence" in system and "<query>Jaws cast</query>" in user:
        return "I cannot tell."
    if "Previous Thoughts" not in user:
        path = dict(request.tags)["path"]
        return "So the next query is <query>" + ("Jaws director" if path.endswith("s0") else "Jaws cast")
    return policy(request, sample)


def test_a_branch_that_never_answers_is_pruned_and_makes_no_pair():
    """Seven iterations, worked by hand (c 1, α 0.9, max_depth 3; √2/2 = 0.7071, √3 = 1.7321,
    √5 = 2.2361, √6 = 2.4495):

    1. root s0 -> Q1 "Jaws director"; rollout: evidence, answer (F1 1) at depth 3: 0.9³ = 0.729.
    2. root s1 -> Q2 "Jaws cast"; rollout: the evidence step is malformed, no answer: 0.
    3. root full (ΣN 2): Q1 0.729 + 0.7071 = 1.4361 > Q2 0 + 0.7071 -> Q1 s0 -> E1: 0.729.
    4. ΣN 3: Q1 0.729 + √3/3 = 1.3064 > Q2 √3/2 = 0.8660 -> Q1 s1 -> E2 (E1's text): 0.729.
    5. ΣN 4: Q1 0.729 + 2/4 = 1.229 > Q2 2/2 = 1 -> Q1 full, E1 = E2, the first: E1 -> A1: 0.729.
    6. ΣN 5: Q1 0.729 + √5/5 = 1.1762 > Q2 √5/2 = 1.1180 -> Q1; E1 (N 2) 0.729 + √3/3 = 1.3064
       < E2 (N 1) 0.729 + √3/2 = 1.5950 -> E2 -> A2: 0.729.
    7. ΣN 6: Q1 0.729 + √6/6 = 1.1372 < Q2 √6/2 = 1.2247 -> Q2 s0 -> G, a malformed evidence
       step: a format error, 0.

    N: root 7, Q1 5, Q2 2, E1 2, E2 2, A1 1, A2 1, G 1. Q: root 0.729 · 5 / 7 = 0.520714,
    Q2 and G 0, the rest 0.729. Q2's subtree holds no answer (its rollout failed, G is malformed):
    Q2 and G are pruned, so the root has one kept child and no pair; E1 and E2 share their text:
    no pair either. Requests: 3 + 2 + 2 + 2 + 1 + 1 + 1 = 12; rollouts from Q1, Q2, E1, E2.
    """
    backend = ScriptedBackend(pruning_policy)
    retriever = FunctionRetriever(lambda q, k: [Hit("p-jaws", "Jaws", "Jaws was directed by Steven Spielberg.", 1.0)])
    context = ShardContext(Batcher(backend), retriever, "run-1", 0)
    tree = asyncio.run(search_question(QUESTION, context, replace(CONFIG, iterations=7)))
    by_path = {n.path: n for n in tree.nodes}
    names = {
        "q": "root",
        "q/s0": "Q1",
        "q/s1": "Q2",
        "q/s0/s0": "E1",
        "q/s0/s1": "E2",
        "q/s0/s0/s0": "A1",
        "q/s0/s1/s0": "A2",
        "q/s1/s0": "G",
    }
    assert sorted(by_path) == sorted(names)
    assert {names[p]: n.visits for p, n in by_path.items()} == {
        "root": 7,
        "Q1": 5,
        "Q2": 2,
        "E1": 2,
        "E2": 2,
        "A1": 1,
        "A2": 1,
        "G": 1,
    }
    assert {names[p]: round(n.value, 6) for p, n in by_path.items()} == {
        "root": 0.520714,
        "Q1": 0.729,
        "Q2": 0.0,
        "E1": 0.729,
        "E2": 0.729,
        "A1": 0.729,
        "A2": 0.729,
        "G": 0.0,
    }
    assert {names[p] for p, n in by_path.items() if not n.is_selected} == {"Q2", "G"}
    assert [names[p] for p, n in by_path.items() if n.is_format_error] == ["G"]
    assert backend.calls == 12
    rollouts = {
        names[next(p for p, n in by_path.items() if n.node_id == r.node_id)]: (r.final_answer, r.f1)
        for r in tree.rollouts
    }
    assert rollouts == {
        "Q1": ("Steven Spielberg", 1.0),
        "Q2": (None, 0.0),
        "E1": ("Steven Spielberg", 1.0),
        "E2": ("Steven Spielberg", 1.0),
    }
    steps = [
        {
            "node_id": n.node_id,
            "parent_id": n.parent_id,
            "kind": n.kind,
            "text": n.text,
            "value": n.value,
            "reached_answer": n.parsed.get("reached_answer", False),
        }
        for n in tree.nodes
        if n.kind != "question" and not n.is_format_error
    ]
    assert step_pairs(steps, min_gap=0.01) == []
