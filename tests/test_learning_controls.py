"""The controls of benchmarks/learning.py, worked by hand: labels rotated among questions of other
kinds (the null control) or of the same kind (the form kept), and the kept steps replaced by the
siblings the tree pruned, and R3's rejected attempt less the steps it shares with the kept one.
No model, no warehouse."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.search.r3.r3_scenario import QUESTION, analysis, policy, run

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "learning_controls.py"
_spec = importlib.util.spec_from_file_location("learning_controls", SCRIPT)
learning_controls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(learning_controls)

# q1 to q3 ask a birth year, q4 and q6 a city, q5 an employer; q7 is the only two-step question
LABELS = {
    "q1": ["1901"],
    "q2": ["1902"],
    "q3": ["1903"],
    "q4": ["Orvath"],
    "q5": ["Belquaeth Ltd"],
    "q6": ["Ulm"],
    "q7": ["Ulm", "1950"],
}
KINDS = {"q1": "born", "q2": "born", "q3": "born", "q4": "city", "q5": "employer", "q6": "city", "q7": "city,founded"}


def _sources(labels: dict[str, list[str]], same_kind: bool) -> dict[str, str]:
    return learning_controls.label_sources({q: len(steps) for q, steps in labels.items()}, KINDS, same_kind)


def test_the_null_control_gives_every_question_a_label_of_another_kind():
    """Sorted by kind: q1 q2 q3 (born), q4 q6 (city), q5 (employer); the largest kind has 3, so
    each takes the labels 3 places on: q1 <- q4, q2 <- q6, q3 <- q5, q4 <- q1, q6 <- q2, q5 <- q3.
    q7, alone with two steps, keeps its own."""
    assert _sources(LABELS, same_kind=False) == (
        {"q1": "q4", "q2": "q6", "q3": "q5", "q4": "q1", "q6": "q2", "q5": "q3", "q7": "q7"}
    )


def test_the_form_control_rotates_labels_within_a_kind():
    """q1 to q3 each take the next one's year (q3 the first's), q4 and q6 swap cities; q5 is alone
    in its kind and the only one left alone, so it keeps its own, as q7 does."""
    assert _sources(LABELS, same_kind=True) == (
        {"q1": "q2", "q2": "q3", "q3": "q1", "q4": "q6", "q6": "q4", "q5": "q5", "q7": "q7"}
    )


def test_one_kind_of_more_than_half_cannot_leave_every_question_another_kind():
    """Three of four ask a year: a shift of 3 sends q1 <- q4 (city), q2 <- q1, q3 <- q2, q4 <- q3."""
    labels = {q: LABELS[q] for q in ("q1", "q2", "q3", "q4")}
    assert _sources(labels, same_kind=False) == {"q1": "q4", "q2": "q1", "q3": "q2", "q4": "q3"}


def _step(example: str, node: str, completion: str) -> dict:
    prompt = {"role": "user", "content": f"prompt of {node}"}
    return {"example_id": example, "node_ids": ["root", node], "messages": [prompt, _said(completion)]}


def _said(content: str) -> dict:
    return {"role": "assistant", "content": content}


def _pair(pair: str, chosen: str, gap: float, rejected: str) -> dict:
    return {"pair_id": pair, "chosen_node_id": chosen, "gap": gap, "rejected": [_said(rejected)]}


def test_the_rejected_control_puts_the_widest_pruned_sibling_in_each_kept_step():
    """n1 won two pairs: the guess by 0.75 over the search, the other by 0.25, so the guess takes
    its place. n2 won two pairs by 1.0: the first pair id (a) gives the wrong answer. n3 won no
    pair and is left out. The prompts stay the kept steps' own."""
    steps = [_step("e1", "n1", "<search> q </search>"), _step("e2", "n2", "<answer> 1901 </answer>")]
    steps.append(_step("e3", "n3", "<answer> Ulm </answer>"))
    pairs = [
        _pair("z", "n1", 0.25, "Answer: Orvath"),
        _pair("y", "n1", 0.75, "Answer: Tyxbyrmere"),
        _pair("b", "n2", 1.0, "<answer> 1950 </answer>"),
        _pair("a", "n2", 1.0, "<answer> 1902 </answer>"),
    ]
    rows = learning_controls.rejected_steps(steps, pairs)
    assert [(r["example_id"], r["messages"][-1]["content"]) for r in rows] == [
        ("e1", "Answer: Tyxbyrmere"),
        ("e2", "<answer> 1902 </answer>"),
    ]
    assert [r["messages"][0]["content"] for r in rows] == ["prompt of n1", "prompt of n2"]
    assert steps[0]["messages"][-1]["content"] == "<search> q </search>"  # the kept rows untouched


def _first_wrong_attempt(reply) -> list[tuple[str, str]]:
    """(the prompt's last line, the completion) of the pruned control's rows of the Jaws question
    (tests/search/r3/r3_scenario.py: a0 ends with Bob, a1 is right but longer, a2 is kept)."""
    _, tree, _ = run(reply)
    gold = {QUESTION["question_id"]: QUESTION["golden_answers"]}
    nodes = [{**row, "parsed": json.loads(row["parsed"])} for row in tree.node_rows()]  # as the warehouse reads
    rows = learning_controls.r3_pruned_steps(nodes, [QUESTION], gold)
    return [(r["messages"][0]["content"].splitlines()[-2], r["messages"][1]["content"]) for r in rows]


def test_the_pruned_control_takes_the_first_wrong_attempt_where_it_leaves_the_kept_one():
    """a0 asks "Jaws cast" where a2 asks "Jaws director": both of a0's steps are its own. Asking
    a2's first query in a2's words, a0 shares its first step's row with a2 (the same prompt, the
    same completion): only its answer, Bob, from the documents a2 read, is left."""
    bob = "The problem analysis: Step 2 of a0.\nThe final answer: Bob"
    cast = "(1) Jaws cast: Jaws stars Roy Scheider."
    director = "(1) Jaws: Jaws was directed by Steven Spielberg."
    assert _first_wrong_attempt(policy) == [
        ("The question: Who directed Jaws?", "The problem analysis: Step 1 of a0.\nThe retrieval query: Jaws cast"),
        (cast, bob),
    ]

    def like_a2(request, sample):
        if dict(request.tags)["path"] == "q/a0":
            return f"The problem analysis: {analysis('q/a2')}\nThe retrieval query: Jaws director"
        return policy(request, sample)

    assert _first_wrong_attempt(like_a2) == [(director, bob)]
