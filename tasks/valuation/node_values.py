"""Monte-Carlo node values and process advantages over the ``nodes`` table (TreePS-RAG, §2.3, Alg. 1).

For every node n with L(n) its descendant leaves (a leaf is its own only descendant leaf):

    V(n) = (1 / |L(n)|) · Σ_{j ∈ L(n)} R_j
    A(n) = (2·V(n) − V(root) − V(p(n))) / sqrt(|L(n)|)

the sum of the global advantage V(n) − V(root) and the local one V(n) − V(p(n)), scaled down
for nodes whose subtree many trajectories share. A leaf is a row with ``is_leaf`` true and a
``reward``; the reward is the one its strategy scored (TreePS-RAG: EM, §2.3), or the metric
``ValuationConfig.metric`` names, read from the leaf's ``parsed`` (every strategy records
``em``, ``f1`` and ``cover_em`` there). The root is the prompt, not a step: it gets a value and
no advantage. Nodes with no leaf below (pruned search children) get ``visits`` 0 and no value.

The same function serves every strategy whose nodes are linked by ``parent_id``: DecEx-RAG trees
(answer and rollout_leaf leaves) as well as TreePS-RAG ones. It works on whole columns: node and
parent ids are hashed once, together (``pyarrow.compute.dictionary_encode``: one code per
distinct id, which also finds a repeated node id), then the leaves' rewards
climb one level per pass with ``numpy.bincount``, so the work is (leaves × depth), not a
recursion per node. Output columns: ``visits`` = |L(n)|, ``value`` = V(n), ``advantage`` = A(n).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.rewards.answer import METRICS
from ragfactory.tasks.search.tree import Node

Frame = TypeVar("Frame", pa.Table, pl.DataFrame)
REQUIRED_COLUMNS = ("node_id", "parent_id", "is_leaf", "reward")
OUTPUT_COLUMNS = ("visits", "value", "advantage")


@dataclass(frozen=True)
class ValuationConfig:
    """Which outcome a leaf contributes."""

    # None: the ``reward`` column, as the strategy scored it (EM for TreePS-RAG, §2.3);
    # "em", "f1" or "cover_em": that score from the leaf's ``parsed``, to revalue with another one.
    metric: str | None = None

    def __post_init__(self):
        if self.metric is not None and self.metric not in METRICS:
            raise ValueError(f"ValuationConfig.metric must be None or one of {sorted(METRICS)}, got {self.metric!r}")


@dataclass(frozen=True)
class NodeValues:
    """Per-node arrays in input row order; NaN marks a missing value or advantage."""

    visits: np.ndarray
    value: np.ndarray
    advantage: np.ndarray


def estimate_node_values(nodes: Frame, config: ValuationConfig = ValuationConfig()) -> Frame:
    """``nodes`` (pyarrow or polars) with ``visits``, ``value`` and ``advantage`` filled in.

    Other columns pass through unchanged and the row order is kept; a pyarrow input comes
    back with the ``nodes`` table's types for the columns it has.
    """
    table = nodes.to_arrow() if isinstance(nodes, pl.DataFrame) else nodes
    result = compute_node_values(table, config)
    columns = {
        "visits": pa.array(result.visits, pa.int64()),
        "value": pa.array(result.value, pa.float64(), from_pandas=True),
        "advantage": pa.array(result.advantage, pa.float64(), from_pandas=True),
    }
    for name, column in columns.items():
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, column) if index >= 0 else table.append_column(name, column)
    if isinstance(nodes, pl.DataFrame):
        return pl.from_arrow(table)
    return _nodes_types(table)


def compute_node_values(table: pa.Table, config: ValuationConfig = ValuationConfig()) -> NodeValues:
    """V, A and |L| for every row of a ``nodes``-shaped table (see the module docstring).

    Node ids hash (run, question, path) but not the strategy, so trees that two strategies grew
    for one question share ids: each strategy's rows are valued on their own.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing or (config.metric is not None and "parsed" not in table.column_names):
        need = missing or ["parsed"]
        raise ValueError(f"nodes table lacks column(s) {need} needed for valuation")
    wanted = [c for c in (*REQUIRED_COLUMNS, "depth", "parsed") if c in table.column_names]
    if "strategy" not in table.column_names or pc.count_distinct(table.column("strategy")).as_py() < 2:
        return _values(table.select(wanted), config)
    strategy = table.column("strategy").combine_chunks()
    result = NodeValues(
        np.zeros(table.num_rows, dtype=np.int64), np.full(table.num_rows, np.nan), np.full(table.num_rows, np.nan)
    )
    for name in pc.unique(strategy).to_pylist():
        mask = pc.is_null(strategy) if name is None else pc.fill_null(pc.equal(strategy, name), False)
        rows = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        part = _values(table.select(wanted).take(rows), config)
        result.visits[rows], result.value[rows], result.advantage[rows] = (part.visits, part.value, part.advantage)
    return result


def _values(table: pa.Table, config: ValuationConfig) -> NodeValues:
    node_ids = table.column("node_id")
    parent = _parent_index(node_ids, table.column("parent_id"))
    leaf_index, rewards = _leaves(table, config)
    levels = _level_bound(table)
    n = table.num_rows
    sums, counts = np.zeros(n), np.zeros(n, dtype=np.int64)
    index = leaf_index
    for _ in range(levels):
        sums += np.bincount(index, weights=rewards, minlength=n)
        counts += np.bincount(index, minlength=n)
        up = parent[index]
        climbing = up >= 0
        index, rewards = up[climbing], rewards[climbing]
        if index.size == 0:
            break
    else:
        if index.size:
            raise ValueError(
                f"node {node_ids[int(index[0])].as_py()!r} sits on a parent cycle, or deeper than its depth column says"
            )
    return _advantages(sums, counts, parent, _roots(parent, levels, node_ids))


def assign_node_values(nodes: Sequence[Node], config: ValuationConfig = ValuationConfig()) -> None:
    """Fill ``visits``, ``value`` and ``advantage`` of in-memory nodes (one or more trees)."""
    table = pa.table(
        {
            "node_id": [n.node_id for n in nodes],
            "parent_id": [n.parent_id for n in nodes],
            "depth": pa.array([n.depth for n in nodes], pa.int32()),
            "is_leaf": [n.is_leaf for n in nodes],
            "reward": pa.array([n.reward for n in nodes], pa.float64()),
            "parsed": [n.row()["parsed"] for n in nodes] if config.metric else pa.nulls(len(nodes), pa.string()),
        }
    )
    result = compute_node_values(table, config)
    for i, node in enumerate(nodes):
        node.visits = int(result.visits[i])
        node.value = None if np.isnan(result.value[i]) else float(result.value[i])
        node.advantage = None if np.isnan(result.advantage[i]) else float(result.advantage[i])


def _parent_index(node_ids: pa.ChunkedArray, parent_ids: pa.ChunkedArray) -> np.ndarray:
    """Row index of each row's parent, -1 for a root; a repeated node id, a missing one or an
    unknown parent is an error naming the node.

    One hash pass over both columns: ``dictionary_encode`` gives every distinct id a code, so
    code -> row is an array, filled from the node ids, and a parent is found by its code.
    """
    n = len(node_ids)
    if node_ids.null_count:
        row = int(pc.index(pc.is_null(node_ids), True).as_py())
        raise ValueError(f"row {row} of the nodes table has no node_id")
    both = pa.chunked_array([*node_ids.chunks, *parent_ids.cast(node_ids.type).chunks], node_ids.type)
    encoded = pc.dictionary_encode(both).combine_chunks()
    codes = pc.fill_null(encoded.indices, -1).to_numpy().astype(np.int64)
    node_codes, parent_codes = codes[:n], codes[n:]
    seen = np.bincount(node_codes, minlength=len(encoded.dictionary))
    if n and seen.max() > 1:
        repeated = encoded.dictionary[int(np.argmax(seen > 1))].as_py()
        raise ValueError(f"node_id {repeated!r} appears more than once in the nodes table")
    row_of = np.full(len(encoded.dictionary) + 1, -1, dtype=np.int64)  # the last: a null parent
    row_of[node_codes] = np.arange(n)
    parent = row_of[parent_codes]  # code -1 reads the last slot: -1
    lost = (parent_codes >= 0) & (parent < 0)
    if lost.any():
        row = int(np.argmax(lost))
        raise ValueError(
            f"node {node_ids[row].as_py()!r} has parent_id {parent_ids[row].as_py()!r}, which is not in the nodes table"
        )
    return parent


def _leaves(table: pa.Table, config: ValuationConfig) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the scored leaves and their rewards."""
    is_leaf = pc.fill_null(table.column("is_leaf"), False)
    if config.metric is None:
        reward = table.column("reward").cast(pa.float64())
    else:
        parsed = pl.from_arrow(table.select(["parsed"])).get_column("parsed")
        reward = parsed.str.json_path_match(f"$.{config.metric}").cast(pl.Float64).to_arrow()
        lacking = pc.and_(is_leaf, pc.is_null(reward))
        if pc.any(lacking).as_py():
            row = int(pc.index(lacking, True).as_py())
            raise ValueError(
                f"leaf {table.column('node_id')[row].as_py()!r} has no {config.metric!r} in its parsed fields"
            )
    scored = pc.and_(is_leaf, pc.is_valid(reward)).to_numpy(zero_copy_only=False)
    index = np.flatnonzero(scored)
    values = reward.to_numpy(zero_copy_only=False).astype(float)
    return index, values[index]


def _level_bound(table: pa.Table) -> int:
    """Passes that reach every root: the deepest depth + 1 when depths are known."""
    if "depth" in table.column_names and table.num_rows:
        deepest = pc.max(table.column("depth")).as_py()
        if deepest is not None:
            return int(deepest) + 1
    return max(table.num_rows, 1)


def _roots(parent: np.ndarray, levels: int, node_ids: pa.ChunkedArray) -> np.ndarray:
    root = np.arange(parent.size)
    for _ in range(levels):
        up = parent[root]
        if not (up >= 0).any():
            return root
        root = np.where(up >= 0, up, root)
    if (parent[root] >= 0).any():
        stuck = int(np.flatnonzero(parent[root] >= 0)[0])
        raise ValueError(
            f"node {node_ids[stuck].as_py()!r} is deeper than its depth column says, or sits on a parent cycle"
        )
    return root


def _advantages(sums: np.ndarray, counts: np.ndarray, parent: np.ndarray, root: np.ndarray) -> NodeValues:
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(counts > 0, sums / counts, np.nan)
        parent_value = np.where(parent >= 0, value[np.maximum(parent, 0)], np.nan)
        advantage = (2 * value - value[root] - parent_value) / np.sqrt(counts)
    return NodeValues(counts, value, advantage)


def _nodes_types(table: pa.Table) -> pa.Table:
    """The columns the ``nodes`` schema knows, cast to its types (others untouched)."""
    schema = table_spec("nodes").schema
    for i, name in enumerate(table.column_names):
        if name in schema.names and table.schema.field(i).type != schema.field(name).type:
            table = table.set_column(i, name, table.column(i).cast(schema.field(name).type))
    return table
