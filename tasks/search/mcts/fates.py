"""Why an MCTS node was kept or pruned, in the dashboard's words (ReasonRAG, §2.2.3).

The search keeps the steps on a path that reaches an answer; every node carries its own Q and N
(``value``, ``visits``), which the sentence quotes. The plug-in declares this as its ``explain``
hook (``tasks/search/strategy.py``), which the tree viewer's node panel asks before its generic
rules (``ragfactory/dashboard/fates.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragfactory.tasks.search.strategy import shown


def explain(node: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]], state: str) -> str:
    """The sentence for a ``kept`` or ``pruned`` MCTS node."""
    stats = f"Q {shown(node.get('value'))}, N {node.get('visits')}"
    if state == "kept":
        return f"kept: on a path that reaches an answer ({stats})"
    return f"pruned: no path through it reached an answer ({stats})"
