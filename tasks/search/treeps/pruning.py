"""Which search children of a parent TreePS-RAG keeps: similarity-based or random pruning.

TreePS-RAG, §2.2 "Similarity-based Pruning": the intent of a search is read from what it retrieved.
Two sibling searches are as similar as the Jaccard similarity J of their top-K passage-id sets;
the children are split by hierarchical clustering on the distances 1 − J into
N̂ = min(N_retain, |C_search|) clusters and one representative per cluster is kept. The paper
names neither the linkage nor the representative: average linkage needs only the pairwise
distances (ward and centroid assume Euclidean points), and the representative is the first
sampled member, samples being exchangeable. Cutting the dendrogram into exactly N̂ clusters
merges identical passage sets (distance 0) before anything else, so while at least N̂ distinct
sets exist no two kept children retrieved the same passages.

The ablation of Table 2 ("w/o … similarity-based pruning") keeps N̂ children at random instead.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
from scipy.cluster.hierarchy import cut_tree, linkage

LINKAGES = ("average", "complete", "single", "weighted")
PRUNING_MODES = ("similarity", "random")


def jaccard(a: Collection[str], b: Collection[str]) -> float:
    """|A ∩ B| / |A ∪ B| of two passage-id sets; 1 for two empty sets (nothing tells them apart).

    >>> jaccard(["p1", "p2", "p3"], ["p1", "p2", "p4"]), jaccard([], [])
    (0.5, 1.0)
    """
    a, b = frozenset(a), frozenset(b)
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def jaccard_distances(passage_sets: Sequence[Collection[str]]) -> np.ndarray:
    """Condensed (scipy ``pdist`` order) 1 − J(A, B) (``jaccard``); two empty sets are identical.

    >>> jaccard_distances([{"a", "b"}, {"b", "c"}, {"a", "b"}]).round(3).tolist()
    [0.667, 0.0, 0.667]
    """
    sets = [frozenset(s) for s in passage_sets]
    return np.asarray(
        [1.0 - jaccard(sets[i], sets[j]) for i in range(len(sets)) for j in range(i + 1, len(sets))], dtype=float
    )


def cluster_labels(passage_sets: Sequence[Collection[str]], n_clusters: int, method: str = "average") -> list[int]:
    """A cluster label per set, ``n_clusters`` labels in all (fewer sets: one label each)."""
    if method not in LINKAGES:
        raise ValueError(f"linkage must be one of {LINKAGES}, got {method!r}")
    if n_clusters < 1:
        raise ValueError(f"n_clusters must be >= 1, got {n_clusters}")
    n = len(passage_sets)
    if n <= n_clusters:
        return list(range(n))
    tree = linkage(jaccard_distances(passage_sets), method=method)
    return [int(label) for label in cut_tree(tree, n_clusters=n_clusters).ravel()]


def representatives(labels: Sequence[int]) -> list[int]:
    """The index of each cluster's first member, in index order."""
    first: dict[int, int] = {}
    for index, label in enumerate(labels):
        first.setdefault(label, index)
    return sorted(first.values())


def similarity_retain(
    passage_sets: Sequence[Collection[str]], n_retain: int, method: str = "average"
) -> tuple[list[int], list[int]]:
    """(kept indices, cluster label per set) for min(n_retain, len) clusters."""
    if not passage_sets:
        return [], []
    labels = cluster_labels(passage_sets, min(n_retain, len(passage_sets)), method)
    return representatives(labels), labels


def random_retain(n: int, n_retain: int, rng: np.random.Generator) -> list[int]:
    """min(n_retain, n) indices of ``n`` drawn without replacement, in index order."""
    return sorted(int(i) for i in rng.choice(n, size=min(n_retain, n), replace=False))
