"""The node panel's sentence on why a node was kept or pruned, per strategy's recorded decision."""

from __future__ import annotations

from ragfactory.dashboard.fates import fate, status
from ragfactory.tasks.search.treeps.pruning import jaccard


def _node(node_id="n-aaaaaaaaaa", kind="sub_query", selected=True, parsed=None, **row):
    return {
        "node_id": node_id,
        "parent_id": "root",
        "kind": kind,
        "strategy": row.pop("strategy", "treeps"),
        "is_selected": selected,
        "is_format_error": False,
        "value": None,
        "parsed": parsed or {},
        **row,
    }


def test_treeps_names_the_jaccard_to_the_kept_sibling_of_its_cluster():
    kept = _node("kept-123456789", parsed={"cluster": 0}, passage_ids=["p1", "p2", "p3"])
    pruned = _node("pruned-1234567", selected=False, parsed={"cluster": 0}, passage_ids=["p1", "p2", "p4"])
    other = _node("other-12345678", parsed={"cluster": 1}, passage_ids=["p9"])
    assert fate(pruned, [kept, other]) == "pruned: Jaccard 0.50 to sibling kept-123… (kept for cluster 0)"
    assert fate(kept, [pruned, other]) == "kept: the representative of retrieval cluster 0 (2 similar searches)"
    assert jaccard([], []) == 1.0


def test_r3_attempts_apex_plans_and_mcts_steps():
    attempt = _node(
        kind="answer",
        selected=False,
        strategy="r3",
        parsed={"attempt": 1, "reason": "incorrect", "outcome": "incorrect", "scale": -0.2},
    )
    assert fate(attempt, []) == "pruned: attempt 1 incorrect (outcome incorrect, scale -0.2)"
    plan = _node(kind="plan", selected=False, strategy="apex", parsed={"source": "planner", "f1": 0.25})
    assert fate(plan, []) == "pruned: SEPR F1 0.25; plans scoring at least as high were executed"
    gold = _node(kind="plan", strategy="apex", parsed={"source": "gold"})
    assert fate(gold, [plan]) == "kept: the dataset's gold decomposition, executed"
    step = _node(kind="answer", selected=False, strategy="mcts", value=0.0, visits=1)
    assert fate(step, []) == "pruned: no path through it reached an answer (Q 0, N 1)"


def test_decex_votes_duplicates_rollouts_and_the_root():
    votes = [
        _node(f"t{i}-000000000", kind="termination", selected=d == "continue", strategy="decex", parsed={"decision": d})
        for i, d in enumerate(["continue", "continue", "terminate"])
    ]
    assert fate(votes[2], votes[:2]) == "pruned: voted terminate, against the majority (1 of 3 votes terminate)"
    twin = _node(kind="self_answer", selected=False, strategy="decex", parsed={"duplicate_of": "abcdef0123456"})
    assert fate(twin, []) == "pruned: the same text as sibling abcdef01…, which was valued instead"
    rollout = _node(kind="rollout_leaf", selected=False, strategy="decex", reward=1.0, value=1.0)
    assert fate(rollout, []).startswith("rollout: scored 1, ")
    root = {"node_id": "q", "parent_id": None, "kind": "question", "is_selected": False, "parsed": {}}
    assert status(root) == "question" and fate(root, []).startswith("the question")
