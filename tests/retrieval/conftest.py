"""Shared fixtures for the retrieval tests: a hand-made corpus and a hashing embedder fake."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pyarrow as pa
import pytest

CORPUS = [
    ("p-eiffel", "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris, France."),
    ("p-penguin", "Emperor penguin", "The emperor penguin cannot fly but dives deeper than any other bird."),
    ("p-pasta", "Carbonara", "Carbonara is a Roman pasta dish made with eggs, cheese and guanciale."),
    ("p-volcano", "Krakatoa", "Krakatoa is a volcano whose 1883 eruption was heard thousands of kilometres away."),
    ("p-violin", "Stradivarius", "A Stradivarius is a violin built by the Italian luthier Antonio Stradivari."),
    ("p-river", "Danube", "The Danube river flows through ten countries before reaching the Black Sea."),
    ("p-chess", "Garry Kasparov", "Garry Kasparov was world chess champion from 1985 until 2000."),
    ("p-moon", "Apollo 11", "Apollo 11 landed the first humans on the Moon in July 1969."),
    ("p-coffee", "Espresso", "Espresso is coffee brewed by forcing hot water through finely ground beans."),
    ("p-glacier", "Perito Moreno", "The Perito Moreno glacier in Patagonia is one of the few that is still growing."),
]


@pytest.fixture
def passages() -> pa.Table:
    ids, titles, texts = zip(*CORPUS)
    return pa.table(
        {"passage_id": list(ids), "source": ["test"] * len(ids), "title": list(titles), "text": list(texts)}
    )


class HashingEmbedder:
    """Bag of hashed words, L2-normalised: texts sharing words get high inner product."""

    def __init__(self, dim: int = 64, name: str = "hashing-64"):
        self.dim, self.name = dim, name

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts)


@pytest.fixture
def hashing_embedder() -> HashingEmbedder:
    return HashingEmbedder()


def assert_ranked(rows, n_queries: int, k: int) -> None:
    """One list per query, each of exactly k hits, scores non-increasing."""
    assert len(rows) == n_queries
    for row in rows:
        assert len(row) == k
        scores = [hit.score for hit in row]
        assert scores == sorted(scores, reverse=True)
