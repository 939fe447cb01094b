"""DecEx-RAG expansion on a hand-worked two-layer tree, and its SFT and DPO exports (§2).

Question "Who is the mother of the director of Jaws?", golden answer "Leah Adler"; k = 3,
n = 2 rollouts, T_max = 2, 3 termination votes, threshold 0.75, metric F1. The scripted policy
(tests/search/decex/jaws_scenario.py) answers each prompt by what it asks (which table, which history)
and the sample index; the fixed retriever answers three queries.

F1 against "Leah Adler": "Leah Adler" 1; "Leah" 2/3 (P 1, R 1/2); "Leah Posner" 1/2 (P = R =
1/2); "1975", "Marcia Lucas", "Arnold Spielberg", "Anne Spielberg" 0.

Layer 0, state [Q]
  termination: continue, continue, terminate "Leah"  -> 1/3 terminate: continue.
    a0 "Leah" (from the terminate vote) = 2/3, pruned.
  sub-questions: s0 "Who directed Jaws?", s1 "who directed jaws" (duplicate of s0, not valued),
    s2 "When was Jaws released?".
    s0 rollouts: search "Jaws director" then "Leah Adler" (1), "Leah" (2/3)  -> 5/6   kept
    s2 rollouts: "1975" (0), "Leah Adler" (1)                                 -> 1/2
  retrieval decision under s0: self-answers w0 "Steven Spielberg", w1 (duplicate), w2 "George Lucas"
    w0 rollouts: "Leah Adler", "Leah Adler" -> 1 >= 0.75: retrieval skipped, w0 kept
    w2 rollouts: "Marcia Lucas" x2          -> 0
Layer 1, state [Q, (Who directed Jaws?, Steven Spielberg)]
  termination: continue x3 (no answer node).
  sub-questions: s0 "Who is the mother of Steven Spielberg?", s1 "Who is Spielberg's father?",
    s2 "I am not sure." (no <question>: format error, not valued).
    s0 rollouts: "Leah Adler" (1), "Leah Posner" (1/2) -> 3/4 kept;  s1: "Arnold Spielberg" x2 -> 0
  retrieval decision under s0: w0 "Leah Posner" -> 1/2, w1 "Anne Spielberg" -> 0, w2 duplicate of w0.
    best 1/2 < 0.75: retrieve. Sub-queries e0 "Steven Spielberg mother" (docs p-leah, p-jaws,
    p-arnold), e1 "Spielberg mother name" ("Query:" prefix dropped), e2 "   " (empty: format error).
    e0 rollouts: "Leah Adler" x2 -> 1 kept;  e1: "Leah Adler", "Leah" -> 5/6
Layer 2 = T_max: termination "Leah Adler", "leah adler", continue -> one answer node a0, 2 votes,
  F1 1, EM 1: the leaf.

SFT: the chain q, s0, w0, s0, e0, a0 has one retrieval (step 2), so two examples: [Q] -> steps 1-2
up to the <search>; [Q, step 1, step 2 with documents] -> the final answer.
DPO (kept against each valued pruned sibling):
  root:      s0 5/6 vs a0 2/3 (decision, 1/6);  s0 5/6 vs s2 1/2 (execution, 1/3)
  q/s0:      w0 1 vs w2 0 (execution, 1)
  layer 1:   s0 3/4 vs s1 0 (execution, 3/4)
  its s0:    e0 1 vs e1 5/6 (execution, 1/6);  e0 1 vs w0 1/2 (decision, 1/2);  e0 1 vs w1 0 (decision, 1)
Requests: layer 0 has 8 (termination, sub-questions, 2 rollout sets + 1 second turn, self-answers,
2 rollout sets); layer 1 has 10; layer 2 has 1: 19 in all, 20 rollouts, 47 nodes.
"""

from __future__ import annotations

import json

import pytest

from ragfactory.tasks.export.dpo import DpoConfig
from ragfactory.tasks.prompts.loader import render_prompt
from ragfactory.tasks.search.decex.exports import preference_pairs, sft_examples
from tests.search.decex.jaws_scenario import CONFIG, QUESTION, expand


@pytest.fixture(scope="module")
def jaws():
    return expand()


S0, S1 = "q/s0/w0/s0", "q/s0/w0"  # layer 1's kept sub-question, and layer 1's state
EXPECTED = {  # path: (kind, value, is_selected)
    "q": ("question", None, False),
    "q/t0": ("termination", None, True),
    "q/t1": ("termination", None, True),
    "q/t2": ("termination", None, False),
    "q/a0": ("answer", 2 / 3, False),
    "q/s0": ("sub_question", 5 / 6, True),
    "q/s1": ("sub_question", None, False),
    "q/s2": ("sub_question", 0.5, False),
    "q/s0/w0": ("self_answer", 1.0, True),
    "q/s0/w1": ("self_answer", None, False),
    "q/s0/w2": ("self_answer", 0.0, False),
    f"{S1}/t0": ("termination", None, True),
    f"{S1}/t1": ("termination", None, True),
    f"{S1}/t2": ("termination", None, True),
    S0: ("sub_question", 0.75, True),
    f"{S1}/s1": ("sub_question", 0.0, False),
    f"{S1}/s2": ("sub_question", None, False),
    f"{S0}/w0": ("self_answer", 0.5, False),
    f"{S0}/w1": ("self_answer", 0.0, False),
    f"{S0}/w2": ("self_answer", None, False),
    f"{S0}/e0": ("sub_query", 1.0, True),
    f"{S0}/e1": ("sub_query", 5 / 6, False),
    f"{S0}/e2": ("sub_query", None, False),
    f"{S0}/e0/t0": ("termination", None, True),
    f"{S0}/e0/t1": ("termination", None, True),
    f"{S0}/e0/t2": ("termination", None, False),
    f"{S0}/e0/a0": ("answer", 1.0, True),
}
ROLLOUT_REWARDS = {  # branch path: rewards of its rollouts r0, r1
    "q/s0": [1.0, 2 / 3],
    "q/s2": [0.0, 1.0],
    "q/s0/w0": [1.0, 1.0],
    "q/s0/w2": [0.0, 0.0],
    S0: [1.0, 0.5],
    f"{S1}/s1": [0.0, 0.0],
    f"{S0}/w0": [0.5, 0.5],
    f"{S0}/w1": [0.0, 0.0],
    f"{S0}/e0": [1.0, 1.0],
    f"{S0}/e1": [1.0, 2 / 3],
}


def by_path(tree):
    return {row["path"]: row for row in tree.node_rows()}


def test_every_node_kind_value_and_kept_branch(jaws):
    rows = by_path(jaws[0])
    branches = {p: (r["kind"], r["value"], r["is_selected"]) for p, r in rows.items() if r["kind"] != "rollout_leaf"}
    assert branches.keys() == EXPECTED.keys()
    for path, (kind, value, selected) in EXPECTED.items():
        assert branches[path] == (kind, pytest.approx(value) if value is not None else None, selected), path


def test_rollout_leaves_and_rows(jaws):
    tree = jaws[0]
    rows = by_path(tree)
    leaves = {p: r["reward"] for p, r in rows.items() if r["kind"] == "rollout_leaf"}
    expected = {f"{b}/r{i}": v for b, values in ROLLOUT_REWARDS.items() for i, v in enumerate(values)}
    assert leaves == pytest.approx(expected)
    for branch in ROLLOUT_REWARDS:
        assert rows[branch]["visits"] == 2
        assert rows[branch]["reward"] == pytest.approx(rows[branch]["value"])
    assert len(tree.rollouts) == 20
    searched = next(r for r in tree.rollout_rows() if r["rollout_id"] == rows["q/s0/r0"]["node_id"])
    assert searched["node_id"] == rows["q/s0"]["node_id"]
    outcome = (searched["final_answer"], searched["em"], searched["f1"], searched["n_steps"])
    assert outcome == ("Leah Adler", 1.0, 1.0, 2)
    assert len(searched["llm_call_ids"]) == 2 and all(searched["llm_call_ids"])
    assert rows["q/s0/r0"]["passage_ids"] == ["p-jaws"]
    assert '<information>\nDoc 1: "Jaws (film)"' in searched["text"]


def test_decisions_answers_and_retrieval(jaws):
    tree, _, _, retriever = jaws
    rows = by_path(tree)
    parsed = {p: json.loads(r["parsed"]) for p, r in rows.items()}
    assert parsed["q/s0"]["retrieval_decision"] == "skip"
    assert not [p for p in rows if p.startswith("q/s0/e")]  # no sub-query generated when skipped
    assert parsed[S0]["retrieval_decision"] == "retrieve"
    assert rows[f"{S0}/e0"]["passage_ids"] == ["p-leah", "p-jaws", "p-arnold"]
    assert parsed[f"{S0}/e1"]["query"] == "Spielberg mother name"
    assert (rows[f"{S0}/e2"]["is_format_error"], rows[f"{S0}/e2"]["format_error"]) == (True, "empty query")
    malformed = rows[f"{S1}/s2"]
    assert (malformed["is_format_error"], malformed["format_error"]) == (True, "missing <question>")
    assert parsed["q/s1"]["duplicate_of"] == rows["q/s0"]["node_id"]
    assert parsed[f"{S0}/w2"]["duplicate_of"] == rows[f"{S0}/w0"]["node_id"]
    final = parsed[f"{S0}/e0/a0"]
    assert (final["answer"], final["votes"], final["em"], final["f1"]) == ("Leah Adler", 2, 1.0, 1.0)
    assert rows[f"{S0}/e0/a0"]["is_leaf"] and rows[f"{S0}/e0/a0"]["reward"] == 1.0
    assert (parsed["q/a0"]["em"], parsed["q/a0"]["f1"]) == (0.0, pytest.approx(2 / 3))
    assert ["Steven Spielberg mother", "Spielberg mother name"] in retriever.batches
    assert sorted(map(tuple, retriever.batches)) == sorted(
        [("Jaws director",), ("Steven Spielberg mother", "Spielberg mother name")]
    )


def test_requests_use_n_and_seeds_per_node(jaws):
    _, backend, batcher, _ = jaws
    requests = [r for batch in backend.batches for r in batch]
    assert batcher.stats.requests == len(requests) == 19
    assert sorted(r.sampling.n for r in requests) == [1] + [2] * 10 + [3] * 8
    assert all(r.sampling.temperature == CONFIG.temperature for r in requests)
    assert len({r.sampling.seed for r in requests}) == 19
    rollout_firsts = [r for r in requests if r.sampling.n == 2]
    assert all(r.sampling.stop == ("</search>", "</answer>") for r in rollout_firsts)


STEP_1 = "Step 1:\nFirst find the director.\nSub-question: Who directed Jaws?\nAnswer: Steven Spielberg"
STEP_2 = "Step 2:\nNow the mother.\nSub-question: Who is the mother of Steven Spielberg?"
DOCS = (
    "<information>\n"
    'Doc 1: "Leah Adler"\nLeah Adler was the mother of Steven Spielberg.\n'
    'Doc 2: "Jaws (film)"\nJaws is a 1975 film directed by Steven Spielberg.\n'
    'Doc 3: "Arnold Spielberg"\nArnold Spielberg was an electrical engineer.\n'
    "</information>"
)


def prompt_with(history: str) -> str:
    return render_prompt("decex_rollout", question=QUESTION["question"], iter_history=history)


def test_sft_examples_follow_the_best_chain(jaws):
    tree, backend, _, _ = jaws
    rows = by_path(tree)
    examples = sft_examples(tree.node_rows(), [QUESTION])
    chain = [rows[p]["node_id"] for p in ["q", "q/s0", S1, S0, f"{S0}/e0", f"{S0}/e0/a0"]]
    search = f"{STEP_2}\n<search> Steven Spielberg mother </search>"
    assert [e["messages"] for e in examples] == [
        [{"role": "user", "content": prompt_with("None")}, {"role": "assistant", "content": f"{STEP_1}\n\n{search}"}],
        [
            {"role": "user", "content": prompt_with(f"{STEP_1}\n\n{search}\n{DOCS}")},
            {"role": "assistant", "content": "The documents name her.\n<answer> Leah Adler </answer>"},
        ],
    ]
    assert [e["node_ids"] for e in examples] == [chain[:5], chain]
    owners = {(e["run_id"], e["question_id"], e["strategy"]) for e in examples}
    assert owners == {("run-1", "jaws", "decex")}
    assert len({e["example_id"] for e in examples}) == 2
    seen = {r.messages[0].content for batch in backend.batches for r in batch}
    assert examples[1]["messages"][0]["content"] in seen  # e0's rollouts read exactly this state


PAIRS = [  # label, chosen path, rejected path, chosen value, rejected value
    ("decision", "q/s0", "q/a0", 5 / 6, 2 / 3),
    ("execution", "q/s0", "q/s2", 5 / 6, 1 / 2),
    ("execution", "q/s0/w0", "q/s0/w2", 1.0, 0.0),
    ("execution", S0, f"{S1}/s1", 0.75, 0.0),
    ("execution", f"{S0}/e0", f"{S0}/e1", 1.0, 5 / 6),
    ("decision", f"{S0}/e0", f"{S0}/w0", 1.0, 0.5),
    ("decision", f"{S0}/e0", f"{S0}/w1", 1.0, 0.0),
]


def test_preference_pairs_kept_against_pruned_siblings(jaws):
    tree = jaws[0]
    rows = by_path(tree)
    ids = {r["node_id"]: p for p, r in rows.items()}
    pairs = preference_pairs(tree.node_rows(), [QUESTION])
    got = [
        (p["decision"], ids[p["chosen_node_id"]], ids[p["rejected_node_id"]], p["chosen_value"], p["rejected_value"])
        for p in pairs
    ]
    assert got == [(lbl, c, r, pytest.approx(cv), pytest.approx(rv)) for lbl, c, r, cv, rv in PAIRS]
    assert [p["gap"] for p in pairs] == pytest.approx([cv - rv for *_, cv, rv in PAIRS])
    assert len({p["pair_id"] for p in pairs}) == len(PAIRS)


def test_preference_pair_texts(jaws):
    pairs = preference_pairs(jaws[0].node_rows(), [QUESTION])
    first, last = pairs[0], pairs[-1]
    assert first["prompt"] == [{"role": "user", "content": prompt_with("None")}]
    assert first["chosen"] == [
        {"role": "assistant", "content": "Step 1:\nFirst find the director.\nSub-question: Who directed Jaws?"}
    ]
    assert first["rejected"] == [{"role": "assistant", "content": "A guess.\n<answer> Leah </answer>"}]
    assert last["prompt"] == [{"role": "user", "content": prompt_with(STEP_1)}]
    assert last["chosen"][0]["content"] == f"{STEP_2}\n<search> Steven Spielberg mother </search>"
    assert last["rejected"][0]["content"] == f"{STEP_2}\nAnswer: Anne Spielberg"


@pytest.mark.parametrize(
    "config,expected",
    [
        (DpoConfig(min_gap=0.2), [p for p in PAIRS if p[3] - p[4] >= 0.2]),
        (DpoConfig(labels=("execution",)), [p for p in PAIRS if p[0] == "execution"]),
        (DpoConfig(labels=("decision",), min_gap=0.6), [PAIRS[-1]]),
    ],
)
def test_preference_pair_filters(jaws, config, expected):
    rows = by_path(jaws[0])
    ids = {r["node_id"]: p for p, r in rows.items()}
    pairs = preference_pairs(jaws[0].node_rows(), [QUESTION], config)
    assert [(ids[p["chosen_node_id"]], ids[p["rejected_node_id"]]) for p in pairs] == [
        (c, r) for _, c, r, *_ in expected
    ]
