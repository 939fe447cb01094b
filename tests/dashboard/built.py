"""One small build of all five strategies for the dashboard's browser tests, by a scripted engine.

The flow, tasks, batcher, call cache, BM25 index, SEPR's bundled MiniLM and the warehouse are
real; the engine is the scripted double of tests/fakes.py, answering each strategy's prompts
with that strategy's flow-test policy (tests/flows/scripted_policies.py): DecEx and TreePS on two
HotpotQA questions, MCTS and R3 on the same two, APEX on two MuSiQue questions with gold plans.
Built once per test session (a few seconds), it gives every page real rows of every kind: wide
DecEx and MCTS trees, TreePS chains, R3 attempts with their rewards, APEX plans with SEPR F1.
"""

from __future__ import annotations

from pathlib import Path

from ragfactory.tasks.llm.types import Request
from tests.fakes import ScriptedBackend, scripted_llm

RUN_ID = "dash-five"
APEX_MARKS = (
    "planning agent",
    "to answer a sub-question",
    "Answer the sub-question below",
    "question decomposition below",
    "one sub-question of a complex question",
    "knowledge base below",
)
MCTS_MARKS = ("extract relevant evidence", "question-answering assistant with access to a retrieval tool")
R3_MARKS = ("# Role", "Judge how relevant retrieved documents", "Decide whether a predicted answer")


def policy(request: Request, sample: int) -> str:
    """Each strategy's scripted reply, told apart by the prompts only that strategy writes."""
    from tests.flows.scripted_policies import apex_policy, mcts_policy, r3_policy, treeps_and_decex

    text = "\n".join(m.content for m in request.messages)
    if any(mark in text for mark in R3_MARKS):
        return r3_policy(request, sample)
    if any(mark in text for mark in MCTS_MARKS):
        return mcts_policy(request, sample)
    if any(mark in text for mark in APEX_MARKS):
        return apex_policy(request, sample)
    return treeps_and_decex(request, sample)  # TreePS, and DecEx behind it


def config(root: Path) -> dict:
    from ragfactory.tasks.data.loaders import load_bundled

    hotpot = [q["question_id"] for q in load_bundled("hotpotqa", limit=2).questions]
    musique = [q["question_id"] for q in load_bundled("musique", limit=2).questions]
    return {
        "name": "dashboard-five",
        "warehouse": {"root": str(root)},
        "datasets": [{"name": "hotpotqa", "limit": 2}, {"name": "musique", "limit": 2}],
        "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
        "retrieval": {"dense": {"enabled": False}},
        "llm": scripted_llm(),
        "search": {
            "strategies": ["decex", "treeps", "mcts", "r3", "apex"],
            "question_ids": {"decex": hotpot, "treeps": hotpot, "mcts": hotpot, "r3": hotpot, "apex": musique},
            "decex": {"k": 2, "n_rollouts": 2, "t_max": 2, "termination_samples": 1},
            "treeps": {"n": 4, "depth": 2},
            "mcts": {"iterations": 4, "child_limit": 2, "max_depth": 3, "alpha": 0.95},
            "r3": {"n_attempts": 2},
            "apex": {"n_plans": 2, "max_hops": 1},
        },
    }


def build_five(root: Path) -> dict:
    """Build the five strategies into ``root`` (the engine registered for the build only)."""
    from ragfactory.flows.build import build
    from ragfactory.flows.config import BuildConfig
    from tests.fakes import registered_engine

    with registered_engine(ScriptedBackend(policy)):
        summary = build(BuildConfig.model_validate(config(root)), run_id=RUN_ID)
    assert summary["status"] == "completed", summary
    return summary
