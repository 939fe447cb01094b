"""Sentence embeddings cached by (model, text hash), in memory and on disk (APEX-Searcher, §2.2.1).

SEPR embeds every sub-question of every sampled plan and of every gold plan; the same texts come
back across the G plans of a question, across runs, and at every GRPO step. ``EmbeddingCache``
asks the embedder only for texts it has not seen, and persists what it computed under a folder
the caller passes (the build passes ``Warehouse(root).artifacts_dir("embeddings")``): one Parquet
file per flushed batch in ``<folder>/<model>/``, rows (model, text_sha, vector), each file
written under a temporary name and renamed, so concurrent workers never tear or overwrite each
other's files. A new cache reads every file of its model once, on first use.

``HashingEmbedder`` is a deterministic bag-of-words embedder (token hashes into ``dim`` signed
buckets): no model, no randomness, microseconds per text. It backs the runnable examples and the
fast tests, and is a lexical baseline; SEPR's semantic matching needs a sentence encoder.

>>> cache = EmbeddingCache(HashingEmbedder(dim=64))
>>> cache.vectors(["Who directed Jaws?", "Who directed Jaws?"]).shape
(2, 64)
>>> (cache.hits, cache.misses)
(1, 1)
"""

from __future__ import annotations

import hashlib
import re
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ragfactory.atomic import atomic_path

if TYPE_CHECKING:  # the dense module pulls in faiss, which a reward function never needs
    from ragfactory.tasks.retrieval.dense import Embedder

_TOKEN = re.compile(r"[a-z0-9#]+")
_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def text_key(text: str) -> str:
    """The content address of a text: 32 hex digits of its SHA-256."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class HashingEmbedder:
    """Lower-cased word tokens hashed into ``dim`` signed buckets, L2-normalised."""

    def __init__(self, dim: int = 256):
        if dim < 2:
            raise ValueError(f"HashingEmbedder.dim must be >= 2, got {dim}")
        self.dim = dim
        self.name = f"hashing-bow-{dim}"

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in _TOKEN.findall(text.lower()):
                digest = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")
                out[row, digest % self.dim] += 1.0 if digest >> 63 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self.embed_queries(texts)


class EmbeddingCache:
    """An embedder's vectors for texts, computed once per (model, text) across plans and runs.

    ``flush_every`` new vectors are written as one file as soon as they accumulate; ``flush()``
    writes the rest (call it when a shard ends). Thread-safe: a shard scores plans off the event
    loop while other questions keep generating.
    """

    def __init__(self, embedder: Embedder, folder: str | Path | None = None, flush_every: int = 4096):
        if flush_every < 1:
            raise ValueError(f"EmbeddingCache.flush_every must be >= 1, got {flush_every}")
        self.embedder = embedder
        self.folder = Path(folder) / _SAFE.sub("_", embedder.name) if folder is not None else None
        self.flush_every = flush_every
        self.hits = 0
        self.misses = 0
        self._vectors: dict[str, np.ndarray] = {}
        self._pending: dict[str, np.ndarray] = {}
        self._loaded = self.folder is None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.embedder.name

    @property
    def dim(self) -> int:
        return int(self.embedder.dim)

    def __len__(self) -> int:
        return len(self._vectors)

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """A (len(texts), dim) float32 matrix of the texts' vectors, in order."""
        keys = [text_key(text) for text in texts]
        with self._lock:
            self._load()
            missing: dict[str, str] = {}
            for key, text in zip(keys, texts):
                if key not in self._vectors:
                    missing.setdefault(key, text)
            self.misses += len(missing)
            self.hits += len(keys) - len(missing)
            if missing:
                self._embed(missing)
            out = np.empty((len(keys), self.dim), dtype=np.float32)
            for row, key in enumerate(keys):
                out[row] = self._vectors[key]
        return out

    def flush(self) -> Path | None:
        """Write the vectors computed since the last flush as one Parquet file; its path."""
        with self._lock:
            return self._write_pending()

    def _embed(self, missing: dict[str, str]) -> None:
        vectors = np.asarray(self.embedder.embed_queries(list(missing.values())), dtype=np.float32)
        if vectors.shape != (len(missing), self.dim):
            raise ValueError(
                f"embedder {self.name!r} returned shape {vectors.shape} for {len(missing)} texts of dim {self.dim}"
            )
        for key, vector in zip(missing, vectors):
            self._vectors[key] = vector
            if self.folder is not None:
                self._pending[key] = vector
        if len(self._pending) >= self.flush_every:
            self._write_pending()

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for path in sorted(self.folder.glob("*.parquet")):
            table = pq.read_table(path)
            model = table.column("model").to_pylist()
            keys = table.column("text_sha").to_pylist()
            flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            matrix = flat.astype(np.float32).reshape(len(keys), -1)
            if matrix.shape[1] != self.dim:
                raise ValueError(f"{path}: vectors have dim {matrix.shape[1]}, {self.name!r} makes {self.dim}")
            for name, key, vector in zip(model, keys, matrix):
                if name == self.name:
                    self._vectors.setdefault(key, vector)

    def _write_pending(self) -> Path | None:
        if not self._pending or self.folder is None:
            return None
        keys = list(self._pending)
        matrix = np.stack([self._pending[key] for key in keys]).astype(np.float32)
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), self.dim)
        table = pa.table({"model": [self.name] * len(keys), "text_sha": keys, "vector": vectors})
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{uuid.uuid4().hex}.parquet"
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        self._pending.clear()
        return path
