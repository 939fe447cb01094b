"""Why a node was kept or pruned, in one plain sentence for the tree viewer's node panel.

The strategy that wrote the node explains it first: its plug-in's ``explain`` hook
(``tasks/search/strategy.py``) reads the decision it recorded in the node's row and parsed fields.
What no strategy explains, the generic rules say from the tree model alone: a rollout leaf values
the branch above it, a valued node is compared with its kept sibling, and any other node says
only what it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.search.strategy import shown


def status(node: dict) -> str:
    """The badge: question, format error, kept or pruned."""
    if node.get("parent_id") is None and node.get("kind") == "question":
        return "question"
    if node.get("is_format_error"):
        return "format error"
    return "kept" if node.get("is_selected") else "pruned"


def fate(node: dict, siblings: Sequence[dict]) -> str:
    """One sentence on ``node``'s fate; ``siblings`` are the other children of its parent
    (dicts with node_id, kind, value, is_selected, is_format_error, passage_ids, parsed)."""
    parsed = node.get("parsed") if isinstance(node.get("parsed"), dict) else {}
    node = {**node, "parsed": parsed}
    state = status(node)
    if state == "question":
        return "the question: every branch of the tree starts here"
    if state == "format error":
        return f"format error: {node.get('format_error') or 'the output did not parse'}"
    for rule in (_rollout, _strategy, _valued):
        sentence = rule(node, siblings, state)
        if sentence:
            return sentence
    return "kept: a step on a kept branch" if state == "kept" else "pruned: not selected"


def _rollout(node, siblings, state) -> str | None:
    if node.get("kind") != "rollout_leaf":
        return None
    score = node.get("reward") if node.get("reward") is not None else node.get("value")
    return f"rollout: scored {shown(score)}, which values the branch above it (a rollout is never kept itself)"


def _strategy(node, siblings, state) -> str | None:
    try:
        strategy = STRATEGIES.by_tree_name(node.get("strategy"))
    except ValueError:  # a tree of a strategy this process does not register: the generic rules
        return None
    return strategy.explain(node, siblings, state) if strategy.explain else None


def _valued(node, siblings, state) -> str | None:
    value = node.get("value")
    rivals = [s for s in siblings if s.get("kind") == node.get("kind") and s.get("value") is not None]
    if value is None or not rivals:
        return None
    n = len(rivals) + 1
    if state == "kept":
        return f"kept: highest value {shown(value)} of {n} siblings"
    best = max((s for s in rivals if s.get("is_selected")), key=lambda s: s["value"], default=None)
    if best is None:
        return f"pruned: value {shown(value)}; no sibling of its kind was kept"
    return f"pruned: value {shown(value)} below the kept sibling {best['node_id'][:8]}…'s {shown(best['value'])}"
