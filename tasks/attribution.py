"""Who asked what in one expansion shard, filled in after the strategy ran (docs/ledger.md).

A strategy's rows say which engine call made each node, rollout, reward and plan; this module
turns that around so the ``llm_calls`` rows carry their strategy, question and node, the
``retrievals`` rows their node, and the ``rollouts`` rows the answer metric the strategy scored
with and the final answer's score under it. Everything is derived from the shard's own rows
(never from scheduling order), so a shard run again writes the same values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragfactory.tasks.llm.cache import CallCache
from ragfactory.tasks.retrieval.ledger import LedgerRetriever, nodes_by_passages
from ragfactory.tasks.rewards.answer import METRICS
from ragfactory.warehouse.store import Warehouse


def calls_asked_by(tables: Mapping[str, Sequence[Mapping]]) -> dict[str, tuple[str | None, str | None]]:
    """call id -> (question id, node id) of the first row holding it: nodes, then rollouts (their
    node), rewards (the judged node), plans (no node), in each table's row order."""
    found: dict[str, tuple[str | None, str | None]] = {}
    for node in tables.get("nodes", ()):
        if node.get("llm_call_id"):
            found.setdefault(node["llm_call_id"], (node["question_id"], node["node_id"]))
    for rollout in tables.get("rollouts", ()):
        for cid in rollout.get("llm_call_ids") or ():
            found.setdefault(cid, (rollout["question_id"], rollout["node_id"]))
    for row in tables.get("rewards", ()):
        if row.get("llm_call_id"):
            found.setdefault(row["llm_call_id"], (row["question_id"], row.get("node_id")))
    for plan in tables.get("plans", ()):
        if plan.get("llm_call_id"):
            found.setdefault(plan["llm_call_id"], (plan["question_id"], None))
    return found


def score_rollouts(rollouts: Sequence[dict], metric: str | None, golden: Mapping[str, Sequence[str]]) -> None:
    """Set each rollout's ``metric`` and ``metric_score`` (its final answer under ``metric``)."""
    if metric not in METRICS:
        return
    for rollout in rollouts:
        answers = list(golden.get(rollout["question_id"]) or [])
        rollout["metric"] = metric
        rollout["metric_score"] = float(METRICS[metric](rollout.get("final_answer"), answers)) if answers else None


def write_ledgers(
    wh: Warehouse,
    shard: str,
    strategy: str,
    tables: Mapping[str, list[dict]],
    cache: CallCache,
    retriever: LedgerRetriever,
    settings: Any,
    questions: Sequence[Mapping],
) -> None:
    """Attribute the shard's calls and retrievals, score its rollouts, and write its
    ``retrievals`` shard; the caller writes the other tables (rollouts after this)."""
    nodes = tables.get("nodes") or []
    strategy = nodes[0]["strategy"] if nodes else strategy  # a variant names itself (decex_no_pruning)
    retriever.strategy = strategy
    cache.attribute(strategy, calls_asked_by(tables))
    golden = {q["question_id"]: q.get("golden_answers") for q in questions}
    score_rollouts(tables.get("rollouts", []), getattr(settings, "metric", None), golden)
    rows = retriever.rows(nodes_by_passages(nodes))
    wh.write("retrievals", rows, shard, partition={"run_id": cache.run_id})
