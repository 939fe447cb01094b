"""Why a DecEx-RAG node was kept or pruned, in the dashboard's words (§3.2).

DecEx keeps the highest-valued branch of its siblings (Eq. 1 rollout values; a text that repeats
a sibling's is not valued, ``parsed.duplicate_of``) and the termination votes of the majority
(``parsed.decision``). A branch with a value is left to the dashboard's generic rule, which
compares it with the kept sibling. The plug-in declares ``explain`` as its hook
(``tasks/search/strategy.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def explain(node: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]], state: str) -> str | None:
    """The sentence for a duplicate or a termination vote; None for any other node."""
    parsed = node["parsed"]
    twin = parsed.get("duplicate_of")
    if twin:
        return f"pruned: the same text as sibling {twin[:8]}…, which was valued instead"
    if node.get("kind") != "termination" or "decision" not in parsed:
        return None
    votes = [s for s in siblings if s.get("kind") == "termination"] + [node]
    same = sum((s.get("parsed") or {}).get("decision") == parsed["decision"] for s in votes)
    agreed = "with" if state == "kept" else "against"
    return f"{state}: voted {parsed['decision']}, {agreed} the majority ({same} of {len(votes)} votes {parsed['decision']})"
