"""Why an R3-RAG node was kept or pruned, in the dashboard's words (Algorithm 2).

R3 keeps the best correct attempt; a node of an attempt carries its number, its outcome and its
scale, and a pruned one the reason it lost (``parsed.reason``). The plug-in declares ``explain``
as its hook (``tasks/search/strategy.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragfactory.tasks.search.strategy import shown


def explain(node: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]], state: str) -> str | None:
    """The sentence for a node of an attempt; None for any other node."""
    parsed = node["parsed"]
    if "reason" not in parsed or "attempt" not in parsed:
        return None
    outcome = f"outcome {parsed.get('outcome', '?')}, scale {shown(parsed.get('scale'))}"
    if state == "kept":
        return f"kept: attempt {parsed['attempt']} is the best correct one ({outcome})"
    return f"pruned: attempt {parsed['attempt']} {parsed['reason'].replace('_', ' ')} ({outcome})"
