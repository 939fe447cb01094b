"""Pruning and pair selection over an MCTS tree (ReasonRAG, §2.2.3), worked by hand.

The tree (values are SPRE values; kinds: q sub_query, e evidence, a answer):

    root
    ├── q1 "Who directed X?"    0.60
    │   └── e1 "X: Ann"         0.60
    │       ├── a1 "Ann"        0.90
    │       ├── a2 "Bob"        0.00
    │       └── a3 " Ann "      0.89   (same text as a1 once stripped)
    ├── q2 "Where is X?"        0.30   (never answered below: pruned)
    │   └── e2 "None"           0.30
    ├── q3 "X director"         0.595
    │   └── a4 "Ann"            0.595
    └── a5 "Carl"               0.10
"""

from __future__ import annotations

import pytest

from ragfactory.tasks.search.mcts.pairs import StepPair, answered, step_pairs

ROWS = [
    ("q1", None, "sub_query", "Who directed X?", 0.60),
    ("e1", "q1", "evidence", "X: Ann", 0.60),
    ("a1", "e1", "answer", "Ann", 0.90),
    ("a2", "e1", "answer", "Bob", 0.00),
    ("a3", "e1", "answer", " Ann ", 0.89),
    ("q2", None, "sub_query", "Where is X?", 0.30),
    ("e2", "q2", "evidence", "None", 0.30),
    ("q3", None, "sub_query", "X director", 0.595),
    ("a4", "q3", "answer", "Ann", 0.595),
    ("a5", None, "answer", "Carl", 0.10),
]
STEPS = [dict(zip(("node_id", "parent_id", "kind", "text", "value"), row)) for row in ROWS]


def test_branches_without_an_answer_are_pruned():
    assert answered(STEPS) == {"q1", "e1", "a1", "a2", "a3", "q3", "a4", "a5"}


def test_best_against_worst_per_state():
    # root: q1 0.60, q3 0.595, a5 0.10 (q2 pruned) -> q1 over a5, gap 0.50, stage of q1: query
    # e1: a1 0.90, a3 0.89, a2 0.00 -> a1 over a2, gap 0.90, answer
    # q1, q3: one candidate each -> no pair
    assert step_pairs(STEPS) == [
        StepPair("q1", "a5", "query", pytest.approx(0.50)),
        StepPair("a1", "a2", "answer", pytest.approx(0.90)),
    ]


def test_every_pair_drops_small_gaps_and_identical_texts():
    # root: (q1, q3) gap 0.005 < 0.01 dropped; (q1, a5) 0.50; (q3, a5) 0.495
    # e1: (a1, a2) 0.90; (a1, a3) same text dropped; (a3, a2) 0.89
    pairs = step_pairs(STEPS, mode="all")
    assert [(p.chosen, p.rejected, p.stage, round(p.gap, 3)) for p in pairs] == [
        ("q1", "a5", "query", 0.5),
        ("q3", "a5", "query", 0.495),
        ("a1", "a2", "answer", 0.9),
        ("a3", "a2", "answer", 0.89),
    ]
    # a zero threshold keeps the close pair at the root
    assert ("q1", "q3") in [(p.chosen, p.rejected) for p in step_pairs(STEPS, min_gap=0.0, mode="all")]


def test_an_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="'best_worst' or 'all'"):
        step_pairs(STEPS, mode="top2")


def test_a_step_whose_rollouts_reached_an_answer_is_kept():
    # q2's subtree has no answer node, but its evidence's rollouts answered: it yielded one
    steps = [dict(s) for s in STEPS]
    next(s for s in steps if s["node_id"] == "e2")["reached_answer"] = True
    assert {"q2", "e2"} <= answered(steps)
    # the root now compares q1 0.60, q2 0.30, q3 0.595, a5 0.10: best q1, worst still a5
    assert step_pairs(steps)[0] == StepPair("q1", "a5", "query", pytest.approx(0.50))
