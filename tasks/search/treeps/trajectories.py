"""Trajectories from TreePS-RAG trees with per-step process advantages (§2.3, Figure 1 right).

"Each leaf node corresponds to the end of a complete rollout. Backtracking from the leaf to the
root yields a full agentic trajectory … From the collection of all such paths, we randomly
sample N trajectories." Every root-to-leaf path is one ``trajectories`` row; ``is_sampled``
marks the N a question contributes to training (all of them when it has no more than N), drawn
with ``sample_seed``, a seed derived from the run seed and the question, so a rebuild draws the
same ones. A node shared by several paths carries its one advantage into each of them.

A row holds the trajectory twice: as chat ``messages`` (prompt, then assistant steps and user
observations, what the expansion sent the engine) and as Search-R1's single ``response`` with
``step_spans`` (character offsets, as Python string indices, of each step's model text, with
its node id and advantage A(n): the value every token of the step is trained with) and
``observation_spans`` (the retrieved passages, masked from the loss). ``advantages`` lists the
steps' advantages in order. With the ``llm_calls`` of its steps a row also carries the path's
token ids as the engine sampled them, with loss mask, behaviour log-probs and each step's token
span (``tasks/llm/splice.py``), so a trainer need not re-tokenise ``response``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragfactory.tasks.llm.seeds import derive_seed
from ragfactory.tasks.llm.splice import trajectory_tokens
from ragfactory.tasks.llm.types import Message
from ragfactory.tasks.search.tree import RowTree, group_trees, path_key, stable_id
from ragfactory.tasks.search.treeps.steps import initial_prompt, render_response, step_turns

STEP_KINDS = ("sub_query", "answer")
SAMPLE_PATH = "trajectories"  # the seed path of a question's draw of N trajectories


@dataclass(frozen=True)
class TrajectoryConfig:
    """How many of a tree's trajectories are marked for training."""

    n_samples: int | None = 8  # N = 8, the rollout group size (§2.3, Table 5); None: every path

    def __post_init__(self):
        if self.n_samples is not None and self.n_samples < 1:
            raise ValueError(f"TrajectoryConfig.n_samples must be >= 1 or None, got {self.n_samples}")


def tree_prompt(tree: RowTree) -> str:
    """The prompt the tree's root was expanded with (its question in the recorded template)."""
    roots = tree.children(None)
    if len(roots) != 1:
        raise ValueError(f"question {tree.question_id!r} of run {tree.run_id!r} has {len(roots)} roots")
    root = roots[0]
    name = root["parsed"].get("prompt")
    if not name:
        raise ValueError(
            f"question {tree.question_id!r}: root {root['node_id']!r} records no prompt; is it a TreePS-RAG tree?"
        )
    return initial_prompt(root["text"], name)


def tree_paths(tree: RowTree) -> list[list[dict[str, Any]]]:
    """Every root-to-leaf chain of scored leaves, in the leaves' path order."""
    leaves = sorted(
        (r for r in tree.rows.values() if r.get("is_leaf") and r.get("reward") is not None),
        key=lambda r: path_key(r["path"]),
    )
    chains = [tree.chain(leaf["node_id"]) for leaf in leaves]
    for chain in chains:
        bad = [n for n in chain[1:] if n["kind"] not in STEP_KINDS]
        if chain[0]["kind"] != "question" or bad:
            node = bad[0] if bad else chain[0]
            raise ValueError(
                f"question {tree.question_id!r}: node {node['node_id']!r} of kind "
                f"{node['kind']!r} is not a TreePS-RAG step"
            )
    return chains


def path_turns(chain: list[dict[str, Any]]) -> list[Message]:
    """The chat turns after the prompt: each step's text and, for a search, its observation."""
    return [turn for node in chain[1:] for turn in step_turns(node["text"], node["parsed"].get("hits"))]


def sampled_paths(tree: RowTree, n_paths: int, config: TrajectoryConfig, run_seed: int) -> tuple[set[int], int]:
    """(indices of the paths drawn for training, the seed of the draw)."""
    seed = derive_seed(run_seed, tree.question_id, SAMPLE_PATH)
    if config.n_samples is None or n_paths <= config.n_samples:
        return set(range(n_paths)), seed
    chosen = np.random.default_rng(seed).choice(n_paths, size=config.n_samples, replace=False)
    return {int(i) for i in chosen}, seed


def trajectory_rows(
    nodes_rows: Iterable[Mapping[str, Any]],
    config: TrajectoryConfig = TrajectoryConfig(),
    run_seed: int = 0,
    calls: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """``trajectories`` rows for every tree in ``nodes_rows`` (valued by the valuation stage:
    tasks/valuate.py); ``calls`` (call_id -> ``llm_calls`` row) gives their token columns."""
    rows: list[dict[str, Any]] = []
    for tree in group_trees(nodes_rows).values():
        prompt = [{"role": "user", "content": tree_prompt(tree)}]
        chains = tree_paths(tree)
        chosen, seed = sampled_paths(tree, len(chains), config, run_seed)
        for index, chain in enumerate(chains):
            row = _row(tree, prompt, chain, index in chosen, seed)
            rows.append(row | trajectory_tokens([n.get("llm_call_id") for n in chain[1:]], calls or {}))
    return rows


def _row(tree: RowTree, prompt: list[dict], chain: list[dict], sampled: bool, seed: int) -> dict[str, Any]:
    turns = path_turns(chain)
    response, steps, observations = render_response(turns)
    leaf = chain[-1]
    advantages = [node.get("advantage") for node in chain[1:]]
    if None in advantages:
        node = chain[1:][advantages.index(None)]
        raise ValueError(
            f"question {tree.question_id!r}: node {node['node_id']!r} has no advantage; "
            "run valuation first (the build's valuation stage, tasks/valuate.py, "
            "values the strategies valuation.strategies names)"
        )
    return {
        "trajectory_id": stable_id("trajectory", tree.run_id, tree.question_id, tree.strategy, leaf["node_id"]),
        "run_id": tree.run_id,
        "question_id": tree.question_id,
        "strategy": tree.strategy,
        "leaf_node_id": leaf["node_id"],
        "node_ids": [node["node_id"] for node in chain],
        "prompt": prompt,
        "messages": prompt + [{"role": t.role, "content": t.content} for t in turns],
        "response": response,
        "step_spans": [
            {"node_id": node["node_id"], "char_start": span.start, "char_end": span.end, "advantage": adv}
            for node, span, adv in zip(chain[1:], steps, advantages)
        ],
        "observation_spans": [{"char_start": s.start, "char_end": s.end} for s in observations],
        "advantages": advantages,
        "reward": float(leaf["reward"]),
        "n_steps": len(chain) - 1,
        "is_sampled": sampled,
        "sample_seed": seed,
    }
