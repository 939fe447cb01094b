"""Valuation speed: Monte-Carlo values and process advantages of 1,000,000 nodes (TreePS-RAG, §2.3).

Synthetic ``nodes`` tables of realistic shape. TreePS-RAG trees follow Algorithm 1 with the
paper's N = 8, D = 4, N_retain = 2: each child answers with a probability that grows with depth
(0.25, 0.4, 0.55, 0.7), a few are malformed (5 %), the rest search, two searches per parent are
kept, and kept searches at depth 4 are leaves: about 30 nodes per question. DecEx-like trees
(DecEx-RAG, k = 3, n = 4, T_max = 4) hang four rollout leaves under every sub-question, self-answer and
sub-query branch, three termination votes and an answer per layer: about 150 nodes, depth 7.
A few hundred random shapes are drawn once and repeated with fresh ids up to the row count.

The timed call is ``estimate_node_values`` on a pyarrow table with the ``nodes`` schema (ids,
parents, depth, kind, path, leaf flags, rewards; the text columns null), median of 3 runs.
Target: 2 s for 1,000,000 nodes.

Run: .venv/bin/python benchmarks/valuation.py [--nodes 1000000]
Writes benchmarks/results/valuation.json.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import median_seconds, report  # noqa: E402

from ragfactory.schemas.tables import table_spec  # noqa: E402
from ragfactory.tasks.valuation.node_values import estimate_node_values  # noqa: E402

TARGET_S = 2.0
ANSWER_P = (0.25, 0.4, 0.55, 0.7)

# A shape is parallel lists: parent (local index, -1 for the root), depth, kind, is_leaf.
Shape = tuple[list[int], list[int], list[str], list[bool]]


def treeps_shape(rng: random.Random, n: int = 8, depth: int = 4, n_retain: int = 2) -> Shape:
    parents, depths, kinds, leaves = [-1], [0], ["question"], [False]
    frontier = [0]
    for d in range(1, depth + 1):
        if not frontier:
            break
        branching = -(-n // len(frontier))
        next_frontier = []
        for parent in frontier:
            searches = []
            for _ in range(branching):
                roll = rng.random()
                search = roll >= ANSWER_P[d - 1] + 0.05
                parents.append(parent), depths.append(d)
                kinds.append("sub_query" if search else "answer"), leaves.append(not search)
                if search:
                    searches.append(len(parents) - 1)
            next_frontier += searches[:n_retain]
        frontier = next_frontier
    for node in frontier:
        leaves[node] = True
    return parents, depths, kinds, leaves


def decex_shape(rng: random.Random, k: int = 3, n_rollouts: int = 4, t_max: int = 4) -> Shape:
    parents, depths, kinds, leaves = [-1], [0], ["question"], [False]

    def add(parent: int, kind: str, leaf: bool = False) -> int:
        parents.append(parent), depths.append(depths[parent] + 1), kinds.append(kind), leaves.append(leaf)
        return len(parents) - 1

    def branches(parent: int, kind: str) -> list[int]:
        out = [add(parent, kind) for _ in range(k)]
        for branch in out:
            for _ in range(n_rollouts):
                add(branch, "rollout_leaf", True)
        return out

    state = 0
    for layer in range(t_max):
        for _ in range(k):
            add(state, "termination")
        if rng.random() < 0.5 or layer == t_max - 1:
            add(state, "answer", True)
        if layer == t_max - 1:
            break
        sub_question = branches(state, "sub_question")[0]
        branches(sub_question, "self_answer")
        state = branches(sub_question, "sub_query")[0]
    return parents, depths, kinds, leaves


def nodes_table(shapes: list[Shape], n_nodes: int, strategy_of: list[str], seed: int) -> pa.Table:
    """Shapes repeated with fresh ids until ``n_nodes`` rows (the last tree may be cut short
    only at a whole tree: the count is the nearest tree boundary above)."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list] = {c: [] for c in ("parent", "depth", "kind", "leaf", "question", "strategy")}
    total, question = 0, 0
    while total < n_nodes:
        index = question % len(shapes)
        parents, depths, kinds, leaves = shapes[index]
        parts["parent"].append(np.where(np.asarray(parents) >= 0, np.asarray(parents) + total, -1))
        parts["depth"].append(np.asarray(depths)), parts["leaf"].append(np.asarray(leaves))
        parts["kind"] += kinds
        parts["question"].append(np.full(len(parents), question))
        parts["strategy"] += [strategy_of[index]] * len(parents)
        total += len(parents)
        question += 1
    parent = np.concatenate(parts["parent"])
    leaf = np.concatenate(parts["leaf"])
    ids = np.char.add("n", np.arange(total).astype(str))
    parent_ids = np.where(parent >= 0, np.char.add("n", parent.astype(str)), None)
    reward = np.where(leaf, (rng.random(total) < 0.45).astype(float), np.nan)
    columns = {
        "node_id": pa.array(ids),
        "run_id": pa.array(["bench"] * total),
        "question_id": pa.array(np.char.add("q", np.concatenate(parts["question"]).astype(str))),
        "parent_id": pa.array(parent_ids.tolist(), pa.string()),
        "path": pa.array(ids),
        "depth": pa.array(np.concatenate(parts["depth"]), pa.int32()),
        "strategy": pa.array(parts["strategy"]),
        "kind": pa.array(parts["kind"]),
        "is_leaf": pa.array(leaf),
        "reward": pa.array(reward, from_pandas=True),
    }
    schema = table_spec("nodes").schema
    arrays = [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(total, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def measure(name: str, table: pa.Table) -> dict:
    seconds = median_seconds(lambda: estimate_node_values(table), repeats=3)
    valued = estimate_node_values(table)
    return {
        "trees": name,
        "nodes": table.num_rows,
        "questions": len(set(table.column("question_id").to_pylist())),
        "leaves": int(np.sum(table.column("is_leaf").to_numpy(zero_copy_only=False))),
        "max_depth": int(max(table.column("depth").to_pylist())),
        "valued_nodes": table.num_rows - valued.column("value").null_count,
        "target_s": TARGET_S,
        "measured_s": round(seconds, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--shapes", type=int, default=400)
    args = parser.parse_args()
    rng = random.Random(0)
    treeps = [treeps_shape(rng) for _ in range(args.shapes)]
    decex = [decex_shape(rng) for _ in range(args.shapes // 4)]
    rows = [measure("treeps", nodes_table(treeps, args.nodes, ["treeps"] * len(treeps), 1))]
    mixed = treeps + decex
    strategies = ["treeps"] * len(treeps) + ["decex"] * len(decex)
    order = list(range(len(mixed)))
    rng.shuffle(order)
    rows.append(
        measure(
            "treeps + decex (two strategies)",
            nodes_table([mixed[i] for i in order], args.nodes, [strategies[i] for i in order], 2),
        )
    )
    report("valuation", rows)


if __name__ == "__main__":
    main()
