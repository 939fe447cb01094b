"""Stepwise process labels for PRM training from valued TreePS-RAG trees (§2.3).

TRL's stepwise-supervision format (standard): ``prompt`` (a string), ``completions`` (the steps,
in order) and ``labels`` (one boolean per step). Every root-to-leaf path is one row; a step is a
node (r_i, a_i, o_i), so its completion is the model's text followed by the passages it
retrieved, the context every later step sees. A step is labelled good when its Monte-Carlo
value V(n), the share of correct outcomes below it, is above ``threshold``; the default 0 is
Math-Shepherd's "hard estimation" (good when some continuation reaches the answer), and 0.5
asks for a majority. ``step_values`` and ``node_ids`` keep the numbers and lineage beside the labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.search.tree import group_trees, stable_id
from ragfactory.tasks.search.treeps.steps import information
from ragfactory.tasks.search.treeps.trajectories import tree_paths, tree_prompt


@dataclass(frozen=True)
class StepLabelConfig:
    """When a step counts as good."""

    threshold: float = 0.0  # V(n) > 0: Math-Shepherd's hard estimation; 0.5 for a majority vote
    with_observations: bool = True  # a search step's passages are part of the node (§2.1)

    def __post_init__(self):
        if not 0.0 <= self.threshold < 1.0:
            raise ValueError(f"StepLabelConfig.threshold must be in [0, 1), got {self.threshold}")


def step_text(node: Mapping[str, Any], with_observations: bool) -> str:
    hits = node["parsed"].get("hits")
    if hits is None or not with_observations:
        return node["text"]
    return f"{node['text']}\n\n{information(hits)}"


def step_label_rows(
    nodes_rows: Iterable[Mapping[str, Any]], config: StepLabelConfig = StepLabelConfig()
) -> list[dict[str, Any]]:
    """``step_labels`` rows, one per root-to-leaf path of every valued tree in ``nodes_rows``."""
    rows = []
    for tree in group_trees(nodes_rows).values():
        prompt = tree_prompt(tree)
        for chain in tree_paths(tree):
            steps = chain[1:]
            unvalued = [n["node_id"] for n in steps if n.get("value") is None]
            if unvalued:
                raise ValueError(
                    f"question {tree.question_id!r}: node {unvalued[0]!r} has no value; "
                    "run valuation first (the build's valuation stage, tasks/valuate.py, "
                    "values the strategies valuation.strategies names)"
                )
            values = [float(n["value"]) for n in steps]
            rows.append(
                {
                    "label_id": stable_id(
                        "step_labels", tree.run_id, tree.question_id, tree.strategy, chain[-1]["node_id"]
                    ),
                    "run_id": tree.run_id,
                    "question_id": tree.question_id,
                    "strategy": tree.strategy,
                    "prompt": prompt,
                    "completions": [step_text(n, config.with_observations) for n in steps],
                    "labels": [v > config.threshold for v in values],
                    "step_values": values,
                    "node_ids": [n["node_id"] for n in steps],
                }
            )
    return rows
