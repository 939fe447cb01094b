"""The search-tree model every strategy shares (docs/architecture.md, "Tree and the nodes table").

A ``QuestionTree`` holds one question's nodes and rollouts for one run, as rows ready for the
``nodes`` and ``rollouts`` tables (schemas/tables.py). A node's id is a hash of (run, question, strategy,
path), where the path names the node by where it sits ("q/s0/w1"), so rebuilding a run names
every node the same way whatever the scheduling order. Nodes are mutable while a strategy fills
in their values; ``node_rows`` freezes them into plain dicts with ``parsed`` as JSON text.
``RowTree`` is the read side: one question's rows from the ``nodes`` table, indexed for the
exports (parents, children in path order, root-to-node chains).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

ROOT_SEGMENT = "q"
# The kinds the strategies write (docs/architecture.md, "Tree and the nodes table"); "question" is
# the root state of every tree.
NODE_KINDS = frozenset(
    {
        "question",
        "termination",
        "sub_question",
        "self_answer",
        "sub_query",
        "retrieval",
        "evidence",
        "answer",
        "plan",
        "rollout_leaf",
    }
)


def stable_id(*parts: str) -> str:
    """A 32-hex-digit content address of the parts (the shape of ``llm_calls.call_id``)."""
    payload = json.dumps([str(p) for p in parts], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def node_id(run_id: str, question_id: str, strategy: str, path: str) -> str:
    """The deterministic id of the node at ``path`` in ``question_id``'s ``strategy`` tree of ``run_id``.

    The strategy is part of the address: one run may grow several trees per question (DecEx-RAG
    and TreePS-RAG, or DecEx-RAG with and without pruning), and their paths overlap from the root on.

    >>> node_id("r", "q1", "one", "q/s0") == node_id("r", "q1", "one", "q/s0")
    True
    >>> len({node_id("r", "q1", "one", "q/s0"), node_id("r", "q1", "one", "q/s1"),
    ...      node_id("r", "q1", "other", "q/s0")})
    3
    """
    return stable_id("node", run_id, question_id, strategy, path)


@dataclass
class TableRows:
    """The rows one question (or one shard) produced, per warehouse table."""

    nodes: list[dict] = field(default_factory=list)
    rollouts: list[dict] = field(default_factory=list)
    plans: list[dict] = field(default_factory=list)
    plan_scores: list[dict] = field(default_factory=list)
    rewards: list[dict] = field(default_factory=list)

    def extend(self, other: TableRows) -> None:
        for name, rows in other.tables().items():
            getattr(self, name).extend(rows)

    def tables(self) -> dict[str, list[dict]]:
        return {
            "nodes": self.nodes,
            "rollouts": self.rollouts,
            "plans": self.plans,
            "plan_scores": self.plan_scores,
            "rewards": self.rewards,
        }


def shallow_row(item: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict, its lists copied one level (what ``asdict`` gives for
    fields holding no dataclass, without walking and deep-copying every value)."""
    return {f.name: _copied(getattr(item, f.name)) for f in fields(item)}


def _copied(value: Any) -> Any:
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value


@dataclass
class Node:
    """One row of the ``nodes`` table while a strategy builds it."""

    node_id: str
    run_id: str
    question_id: str
    parent_id: str | None
    path: str
    depth: int
    strategy: str
    kind: str
    text: str = ""
    parsed: dict[str, Any] = field(default_factory=dict)
    passage_ids: list[str] = field(default_factory=list)
    llm_call_id: str | None = None
    is_format_error: bool = False
    format_error: str | None = None
    is_leaf: bool = False
    reward: float | None = None
    visits: int | None = None
    value: float | None = None
    advantage: float | None = None
    is_selected: bool = False

    def row(self) -> dict[str, Any]:
        # field by field: ``asdict`` deep-copied ``parsed`` only for it to be replaced by its JSON
        data = shallow_row(self)
        data["parsed"] = json.dumps(self.parsed, ensure_ascii=False, sort_keys=True)
        return data


@dataclass
class Rollout:
    """One row of the ``rollouts`` table: a simulated completion from a node's state."""

    rollout_id: str
    run_id: str
    question_id: str
    node_id: str
    text: str
    final_answer: str | None
    em: float
    f1: float
    n_steps: int
    llm_call_ids: list[str]
    seed: int

    def row(self) -> dict[str, Any]:
        return shallow_row(self)


@dataclass
class QuestionTree:
    """One question's search tree in one run: nodes in creation order, rollouts, and lookups."""

    run_id: str
    question_id: str
    strategy: str
    nodes: list[Node] = field(default_factory=list)
    rollouts: list[Rollout] = field(default_factory=list)
    _by_id: dict[str, Node] = field(default_factory=dict, repr=False)

    def add_root(self, text: str, **fields: Any) -> Node:
        if self.nodes:
            raise ValueError(f"tree of question {self.question_id!r} already has a root")
        return self._add(None, ROOT_SEGMENT, 0, "question", text, fields)

    def add_child(self, parent: Node, segment: str, kind: str, text: str = "", **fields: Any) -> Node:
        """A new node under ``parent`` at path ``parent.path/segment``."""
        if "/" in segment or not segment:
            raise ValueError(f"path segment must be non-empty without '/', got {segment!r}")
        return self._add(parent, f"{parent.path}/{segment}", parent.depth + 1, kind, text, fields)

    def _add(self, parent: Node | None, path: str, depth: int, kind: str, text: str, fields) -> Node:
        if kind not in NODE_KINDS:
            raise ValueError(f"unknown node kind {kind!r}; known kinds: {', '.join(sorted(NODE_KINDS))}")
        nid = node_id(self.run_id, self.question_id, self.strategy, path)
        if nid in self._by_id:
            raise ValueError(f"duplicate node path {path!r} in question {self.question_id!r}")
        node = Node(
            node_id=nid,
            run_id=self.run_id,
            question_id=self.question_id,
            parent_id=parent.node_id if parent else None,
            path=path,
            depth=depth,
            strategy=self.strategy,
            kind=kind,
            text=text,
            **fields,
        )
        self.nodes.append(node)
        self._by_id[nid] = node
        return node

    def node(self, nid: str) -> Node:
        return self._by_id[nid]

    def children(self, parent: Node, kind: str | None = None) -> list[Node]:
        return [n for n in self.nodes if n.parent_id == parent.node_id and kind in (None, n.kind)]

    def node_rows(self) -> list[dict[str, Any]]:
        """Rows in path order: concurrent expansion creates nodes in a varying order."""
        return [n.row() for n in sorted(self.nodes, key=lambda n: path_key(n.path))]

    def table_rows(self) -> TableRows:
        """The tree as the rows of the ``nodes`` and ``rollouts`` tables."""
        return TableRows(nodes=self.node_rows(), rollouts=self.rollout_rows())

    def rollout_rows(self) -> list[dict[str, Any]]:
        """Rows in the path order of their leaves (a rollout's id is its leaf's node id)."""

        def leaf_path(rollout: Rollout) -> tuple:
            leaf = self._by_id.get(rollout.rollout_id)
            return path_key(leaf.path if leaf else rollout.rollout_id)

        return [r.row() for r in sorted(self.rollouts, key=leaf_path)]


def path_key(path: str) -> tuple:
    """Paths compared segment by segment with numbers as numbers ("s2" before "s10")."""
    return tuple(
        tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", segment)) for segment in path.split("/")
    )


@dataclass
class RowTree:
    """One question's ``nodes`` rows of one run and strategy, with ``parsed`` decoded."""

    run_id: str
    question_id: str
    strategy: str
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    _children: dict[str | None, list[dict[str, Any]]] = field(default_factory=dict, repr=False)

    def add(self, row: Mapping[str, Any]) -> None:
        if row["node_id"] in self.rows:
            raise ValueError(f"node {row['node_id']!r} appears twice in question {self.question_id!r}")
        parsed = row.get("parsed")
        decoded = json.loads(parsed) if isinstance(parsed, str) and parsed else dict(parsed or {})
        self.rows[row["node_id"]] = {**row, "parsed": decoded}
        self._children = {}

    def children(self, nid: str | None) -> list[dict[str, Any]]:
        """The children of node ``nid`` (``None``: the roots), in path order."""
        if not self._children:
            for row in sorted(self.rows.values(), key=lambda r: path_key(r["path"])):
                self._children.setdefault(row["parent_id"], []).append(row)
        return self._children.get(nid, [])

    def chain(self, nid: str) -> list[dict[str, Any]]:
        """The rows from the root down to node ``nid``."""
        chain = []
        current: str | None = nid
        while current is not None:
            if current not in self.rows:
                raise ValueError(f"question {self.question_id!r}: node {current!r} is missing its row")
            chain.append(self.rows[current])
            current = chain[-1]["parent_id"]
            if len(chain) > len(self.rows):
                raise ValueError(f"question {self.question_id!r}: parent cycle at node {nid!r}")
        return chain[::-1]


REQUIRED_ROW_COLUMNS = ("node_id", "run_id", "question_id", "strategy", "parent_id", "path", "kind")


def group_trees(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], RowTree]:
    """``nodes`` rows grouped per (run_id, question_id, strategy), keys in sorted order."""
    trees: dict[tuple[str, str, str], RowTree] = {}
    for i, row in enumerate(rows):
        missing = [c for c in REQUIRED_ROW_COLUMNS if c not in row]
        if missing:
            raise ValueError(f"nodes row {i} lacks column(s) {missing}")
        key = (row["run_id"], row["question_id"], row["strategy"])
        trees.setdefault(key, RowTree(*key)).add(row)
    return dict(sorted(trees.items()))
