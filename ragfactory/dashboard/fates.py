"""Why a node was kept or pruned, in one plain sentence for the tree viewer's node panel.

Each strategy records its decision in the node's row and parsed fields: DecEx keeps the
highest-valued branch of its siblings (Eq. 1 rollout values; a duplicate text is not valued) and
the termination votes of the majority (DecEx-RAG §3.2); TreePS keeps one search per cluster of
Jaccard-similar passage sets (TreePS-RAG §2.2); ReasonRAG MCTS keeps the steps on a path to an
answer (§2.2.3); R3-RAG keeps the best correct attempt (Algorithm 2); APEX executes the plans
with the highest SEPR F1 (APEX-Searcher §2.2.1). The sentence reads those fields; a node with
none of them says only what it is. A strategy may explain its own nodes first (its plug-in's
``explain`` hook, ``tasks/search/strategy.py``), as ReasonRAG MCTS does with their Q and N.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragfactory.tasks.search.registry import STRATEGIES


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
    state = status(node)
    if state == "question":
        return "the question: every branch of the tree starts here"
    if state == "format error":
        return f"format error: {node.get('format_error') or 'the output did not parse'}"
    for rule in (_rollout, _duplicate, _vote, _attempt, _plan, _cluster, _strategy, _valued):
        sentence = rule(node, parsed, siblings, state)
        if sentence:
            return sentence
    return "kept: a step on a kept branch" if state == "kept" else "pruned: not selected"


def _num(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _rollout(node, parsed, siblings, state) -> str | None:
    if node.get("kind") != "rollout_leaf":
        return None
    score = node.get("reward") if node.get("reward") is not None else node.get("value")
    return f"rollout: scored {_num(score)}, which values the branch above it (a rollout is never kept itself)"


def _duplicate(node, parsed, siblings, state) -> str | None:
    twin = parsed.get("duplicate_of")
    return f"pruned: the same text as sibling {twin[:8]}…, which was valued instead" if twin else None


def _vote(node, parsed, siblings, state) -> str | None:
    if node.get("kind") != "termination" or "decision" not in parsed:
        return None
    votes = [s for s in siblings if s.get("kind") == "termination"] + [node]
    same = sum((s.get("parsed") or {}).get("decision") == parsed["decision"] for s in votes)
    agreed = "with" if state == "kept" else "against"
    return f"{state}: voted {parsed['decision']}, {agreed} the majority ({same} of {len(votes)} votes {parsed['decision']})"


def _attempt(node, parsed, siblings, state) -> str | None:
    if "reason" not in parsed or "attempt" not in parsed:
        return None
    outcome = f"outcome {parsed.get('outcome', '?')}, scale {_num(parsed.get('scale'))}"
    if state == "kept":
        return f"kept: attempt {parsed['attempt']} is the best correct one ({outcome})"
    return f"pruned: attempt {parsed['attempt']} {parsed['reason'].replace('_', ' ')} ({outcome})"


def _plan(node, parsed, siblings, state) -> str | None:
    if node.get("kind") != "plan":
        return None
    if parsed.get("source") == "gold":
        return f"{state}: the dataset's gold decomposition" + (", executed" if state == "kept" else "")
    if parsed.get("fallback"):
        return "kept: no sampled plan parsed, so the question itself was executed"
    f1 = parsed.get("f1")
    plans = [s for s in siblings if (s.get("parsed") or {}).get("source") == "planner"] + [node]
    if state == "kept":
        return f"kept: SEPR F1 {_num(f1)}, among the best of {len(plans)} sampled plans, executed"
    return f"pruned: SEPR F1 {_num(f1)}; plans scoring at least as high were executed"


def _cluster(node, parsed, siblings, state) -> str | None:
    if "cluster" not in parsed:
        return None
    mates = [s for s in siblings if (s.get("parsed") or {}).get("cluster") == parsed["cluster"]]
    if state == "kept":
        return f"kept: the representative of retrieval cluster {parsed['cluster']} ({len(mates) + 1} similar searches)"
    kept = next((s for s in mates if s.get("is_selected")), None)
    if kept is None:
        return f"pruned: retrieval cluster {parsed['cluster']} is represented by another search"
    j = jaccard(node.get("passage_ids") or [], kept.get("passage_ids") or [])
    return f"pruned: Jaccard {j:.2f} to sibling {kept['node_id'][:8]}… (kept for cluster {parsed['cluster']})"


def jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    """|A ∩ B| / |A ∪ B| of two passage-id sets (1 for two empty sets: nothing tells them apart)."""
    union = set(a) | set(b)
    return len(set(a) & set(b)) / len(union) if union else 1.0


def _strategy(node, parsed, siblings, state) -> str | None:
    try:
        strategy = STRATEGIES.by_tree_name(node.get("strategy"))
    except ValueError:  # a tree of a strategy this process does not register: the generic rules
        return None
    return strategy.explain(node, state) if strategy.explain else None


def _valued(node, parsed, siblings, state) -> str | None:
    value = node.get("value")
    rivals = [s for s in siblings if s.get("kind") == node.get("kind") and s.get("value") is not None]
    if value is None or not rivals:
        return None
    n = len(rivals) + 1
    if state == "kept":
        return f"kept: highest value {_num(value)} of {n} siblings"
    best = max((s for s in rivals if s.get("is_selected")), key=lambda s: s["value"], default=None)
    if best is None:
        return f"pruned: value {_num(value)}; no sibling of its kind was kept"
    return f"pruned: value {_num(value)} below the kept sibling {best['node_id'][:8]}…'s {_num(best['value'])}"
