"""Which MCTS steps become preference pairs (ReasonRAG, §2.2.3), before any prompt is written.

The paper prunes "all branches that do not yield a final answer", values each remaining step by
SPRE over the finished trajectories below it, and keeps informative pairs of steps taken from
the same state. Here, per state (a parent node):

- the candidates are its children whose subtree holds an answer (``answered``): an ``answer``
  step, or a step whose SPRE rollouts reached one (``reached_answer``: rollouts are not nodes,
  but a step they finished did yield a final answer);
- the pair is the best against the worst candidate by value (``best_worst``, one pair per state:
  the paper's 13,289 pairs from 4,603 questions are 2.9 per question, about one per state of a
  shallow tree), or every ordered pair of candidates (``all``);
- a pair whose two step texts are the same after whitespace is stripped, or whose value gap is
  below ``min_gap`` (default 0.01), is dropped: it teaches nothing;
- the pair's stage is its chosen step's kind: ``query`` (a Reasoning step that searches),
  ``evidence`` (Grounding) or ``answer`` (a Reasoning step that answers).

Steps are plain mappings with ``node_id``, ``parent_id``, ``kind`` (``sub_query``, ``evidence``,
``answer``), ``text`` and ``value``; ties in value go to the step generated first (list order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

STAGES = {"sub_query": "query", "evidence": "evidence", "answer": "answer"}
FLOAT_SLACK = 1e-9


@dataclass(frozen=True)
class StepPair:
    chosen: str  # node ids
    rejected: str
    stage: str
    gap: float


def answered(steps: Sequence[Mapping[str, Any]]) -> set[str]:
    """The node ids whose subtree (the node included) holds an ``answer`` step or a step whose
    rollouts reached an answer."""
    parent_of = {s["node_id"]: s["parent_id"] for s in steps}
    keep: set[str] = set()
    for step in steps:
        if step["kind"] != "answer" and not step.get("reached_answer"):
            continue
        node: str | None = step["node_id"]
        while node is not None and node not in keep:
            keep.add(node)
            node = parent_of.get(node)
    return keep


def step_pairs(steps: Sequence[Mapping[str, Any]], min_gap: float = 0.01, mode: str = "best_worst") -> list[StepPair]:
    """The preference pairs of one question's tree (module docstring), parents in list order."""
    if mode not in ("best_worst", "all"):
        raise ValueError(f"pairs mode must be 'best_worst' or 'all', got {mode!r}")
    keep = answered(steps)
    children: dict[Any, list[Mapping[str, Any]]] = {}
    for step in steps:
        if step["node_id"] in keep:
            children.setdefault(step["parent_id"], []).append(step)
    pairs = []
    for siblings in children.values():
        for chosen, rejected in _candidates(siblings, mode):
            gap = chosen["value"] - rejected["value"]
            if gap < min_gap - FLOAT_SLACK or chosen["text"].strip() == rejected["text"].strip():
                continue
            pairs.append(StepPair(chosen["node_id"], rejected["node_id"], STAGES[chosen["kind"]], gap))
    return pairs


def _candidates(siblings: list[Mapping[str, Any]], mode: str) -> list[tuple[Mapping, Mapping]]:
    if len(siblings) < 2:
        return []
    if mode == "best_worst":
        order = sorted(range(len(siblings)), key=lambda i: (-siblings[i]["value"], i))
        return [(siblings[order[0]], siblings[order[-1]])]
    return [(a, b) if a["value"] >= b["value"] else (b, a) for a, b in combinations(siblings, 2)]
