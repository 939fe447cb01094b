"""Similarity-based pruning by Jaccard distance and hierarchical clustering (TreePS-RAG, §2.2)."""

from __future__ import annotations

import numpy as np
import pytest

from ragfactory.tasks.search.treeps.pruning import (
    cluster_labels,
    jaccard_distances,
    random_retain,
    similarity_retain,
)

A, B, C = {"p1", "p2", "p3"}, {"p4", "p5", "p6"}, {"p1", "p2", "p7"}


@pytest.mark.parametrize(
    "sets,expected",
    [
        ([A, A], [0.0]),
        ([A, B], [1.0]),
        ([A, C], [0.5]),  # |{p1, p2}| / |{p1, p2, p3, p7}|
        ([set(), set()], [0.0]),
        ([set(), A], [1.0]),
    ],
)
def test_jaccard_distance(sets, expected):
    assert jaccard_distances(sets).tolist() == pytest.approx(expected)


@pytest.mark.parametrize(
    "sets,n_retain,kept",
    [
        ([A, B, A, B, A], 2, [0, 1]),  # one child per cluster of identical sets, the first sampled
        ([A, A, B, C, C, C], 3, [0, 2, 3]),
        ([A, C, B, B], 2, [0, 2]),  # A and C overlap: they cluster before B joins them
        ([A, B], 2, [0, 1]),
        ([A], 2, [0]),  # min(N_retain, |C_search|)
        ([], 2, []),
        ([A, A, A], 1, [0]),
    ],
)
def test_similarity_retain_keeps_one_representative_per_cluster(sets, n_retain, kept):
    indices, labels = similarity_retain(sets, n_retain)
    assert indices == kept
    assert len(set(labels)) == min(n_retain, len(sets))
    for i, a in enumerate(sets):
        for j, b in enumerate(sets):
            if a == b:
                assert labels[i] == labels[j]


def test_exactly_n_clusters_even_when_every_set_is_the_same():
    # §2.2 partitions into N̂ clusters: identical sets still yield N̂ children to expand
    kept, labels = similarity_retain([A, A, A, A], 2)
    assert len(kept) == 2 and len(set(labels)) == 2 and kept[0] == 0


@pytest.mark.parametrize("method", ["average", "complete", "single", "weighted"])
def test_every_linkage_separates_disjoint_groups(method):
    assert len(set(cluster_labels([A, A, B, B], 2, method)[:2])) == 1


def test_cluster_labels_refuse_bad_arguments():
    with pytest.raises(ValueError, match="linkage"):
        cluster_labels([A, B, C], 2, "ward")
    with pytest.raises(ValueError, match="n_clusters"):
        cluster_labels([A, B, C], 0)


def test_random_retain_draws_without_replacement():
    draws = {tuple(random_retain(6, 2, np.random.default_rng(seed))) for seed in range(20)}
    assert all(len(set(d)) == 2 and list(d) == sorted(d) for d in draws) and len(draws) > 3
    assert random_retain(1, 2, np.random.default_rng(0)) == [0]
