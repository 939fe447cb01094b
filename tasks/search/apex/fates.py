"""Why an APEX-Searcher plan was executed or not, in the dashboard's words (§2.2.1).

APEX executes the sampled plans with the highest SEPR F1 (``parsed.f1``), or the dataset's gold
decomposition (``parsed.source``), or the question itself when no plan parsed
(``parsed.fallback``). The plug-in declares ``explain`` as its hook (``tasks/search/strategy.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragfactory.tasks.search.strategy import shown


def explain(node: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]], state: str) -> str | None:
    """The sentence for a ``plan`` node; None for any other node."""
    parsed = node["parsed"]
    if node.get("kind") != "plan":
        return None
    if parsed.get("source") == "gold":
        return f"{state}: the dataset's gold decomposition" + (", executed" if state == "kept" else "")
    if parsed.get("fallback"):
        return "kept: no sampled plan parsed, so the question itself was executed"
    f1 = shown(parsed.get("f1"))
    plans = [s for s in siblings if (s.get("parsed") or {}).get("source") == "planner"] + [node]
    if state == "kept":
        return f"kept: SEPR F1 {f1}, among the best of {len(plans)} sampled plans, executed"
    return f"pruned: SEPR F1 {f1}; plans scoring at least as high were executed"
