"""Why a TreePS-RAG search was kept or pruned, in the dashboard's words (§2.2).

TreePS keeps one search per cluster of Jaccard-similar passage sets (``parsed.cluster``,
``pruning.py``); a pruned search is shown with its similarity to the kept one of its cluster,
the same Jaccard the pruning clustered on. The plug-in declares ``explain`` as its hook
(``tasks/search/strategy.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragfactory.tasks.search.treeps.pruning import jaccard


def explain(node: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]], state: str) -> str | None:
    """The sentence for a clustered search; None for any other node."""
    parsed = node["parsed"]
    if "cluster" not in parsed:
        return None
    cluster = parsed["cluster"]
    mates = [s for s in siblings if (s.get("parsed") or {}).get("cluster") == cluster]
    if state == "kept":
        return f"kept: the representative of retrieval cluster {cluster} ({len(mates) + 1} similar searches)"
    kept = next((s for s in mates if s.get("is_selected")), None)
    if kept is None:
        return f"pruned: retrieval cluster {cluster} is represented by another search"
    j = jaccard(node.get("passage_ids") or [], kept.get("passage_ids") or [])
    return f"pruned: Jaccard {j:.2f} to sibling {kept['node_id'][:8]}… (kept for cluster {cluster})"
