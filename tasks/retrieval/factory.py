"""Pick and assemble a retriever by kind: a local BM25 or dense index, a remote server, or a
kind registered by name (``register_retriever``; a test registers a fake retriever this way).

With an ``index_root`` the local indexes are loaded from, or saved to, that folder (see
``index_store``); without one they are built in memory. ``make_retriever_from_config`` reads
the build config's retrieval section: a ``server_url`` wins over local indexes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from ragfactory.tasks.retrieval.types import Retriever

Kind = Literal["bm25", "dense", "http"]  # the built-in kinds; plugged ones are '<plugin>:<name>'
# Every factory takes the keyword options ``make_retriever`` does and ignores those it has no use for.
RetrieverFactory = Callable[..., Retriever]
_KINDS: dict[str, RetrieverFactory] = {}
_LOCK = threading.Lock()


def register_retriever(kind: str, factory: RetrieverFactory, *, replace: bool = False) -> None:
    """Make ``kind`` a retriever ``make_retriever`` (and a config's ``retrieval.default``) can name.

    ``factory(**options)`` gets ``make_retriever``'s keyword options (passages, index_root,
    bm25, dense, embedder, url, http) and returns a ready ``Retriever``. A plugged kind is named
    ``<plugin>:<name>``, so a config can tell it from a misspelt built-in. Registering a taken
    kind is an error naming it, unless ``replace``. Only this process sees the registration: a
    Prefect worker or any other subprocess must register the kind itself (a module it imports).
    """
    with _LOCK:
        if kind in _KINDS and not replace:
            raise ValueError(f"retriever kind {kind!r} is already registered")
        _KINDS[kind] = factory


def unregister_retriever(kind: str) -> None:
    """Forget ``kind``; an error naming it if it was not registered."""
    with _LOCK:
        if _KINDS.pop(kind, None) is None:
            raise ValueError(f"retriever kind {kind!r} is not registered")


def retriever_factory(kind: str) -> RetrieverFactory:
    """The factory registered for ``kind``; an error naming it and the registered kinds."""
    with _LOCK:
        factory, known = _KINDS.get(kind), sorted(_KINDS)
    if factory is None:
        raise ValueError(f"unknown retriever kind {kind!r}; registered in this process: {', '.join(known)}")
    return factory


def make_retriever(
    kind: str,
    *,
    passages: pa.Table | None = None,
    index_root: str | Path | None = None,
    bm25: Any = None,
    dense: Any = None,
    embedder: Any = None,
    url: str | None = None,
    http: Mapping[str, Any] | None = None,
) -> Retriever:
    """A ready retriever of the registered ``kind``.

    ``bm25`` / ``dense`` take the params dataclasses or the build-config sections (None for
    defaults); ``embedder`` replaces the dense model; ``http`` holds ``HttpRetriever`` options.
    """
    return retriever_factory(kind)(
        passages=passages, index_root=index_root, bm25=bm25, dense=dense, embedder=embedder, url=url, http=http
    )


def http_retriever(*, url: str | None = None, http: Mapping[str, Any] | None = None, **_) -> Retriever:
    """A client of a Search-R1-style retrieval server at ``url``."""
    if not url:
        raise ValueError("retriever kind 'http' needs a url")
    from ragfactory.tasks.retrieval.client import HttpRetriever

    return HttpRetriever(url, **dict(http or {}))


def bm25_retriever(
    *, passages: pa.Table | None = None, index_root: str | Path | None = None, bm25: Any = None, **_
) -> Retriever:
    """A BM25 index over ``passages``, loaded from or saved to ``index_root`` when given."""
    from ragfactory.tasks.retrieval import bm25 as sparse

    params = sparse.BM25Params.from_config(bm25)
    if index_root is None:
        return sparse.BM25Retriever.build(_needed(passages, "bm25"), params)
    return sparse.load_or_build_bm25(_needed(passages, "bm25"), index_root, params)


def dense_retriever(
    *,
    passages: pa.Table | None = None,
    index_root: str | Path | None = None,
    dense: Any = None,
    embedder: Any = None,
    **_,
) -> Retriever:
    """A dense (faiss) index over ``passages``; ``embedder`` replaces the configured model."""
    return _make_dense(_needed(passages, "dense"), index_root, dense, embedder)


def _needed(passages: pa.Table | None, kind: str) -> pa.Table:
    if passages is None:
        raise ValueError(f"retriever kind {kind!r} needs passages to index")
    return passages


def _make_dense(passages: pa.Table, index_root: str | Path | None, dense: Any, embedder: Any) -> Retriever:
    from ragfactory.tasks.retrieval import dense as vectors

    params = vectors.DenseParams.from_config(dense)
    if index_root is not None:
        return vectors.load_or_build_dense(passages, index_root, params, embedder)
    embedder = embedder or vectors.load_embedder(params.model, params.device, params.batch_size)
    return vectors.DenseRetriever.build(passages, embedder, params)


def make_retriever_from_config(
    config: Any, passages: pa.Table | None = None, index_root: str | Path | None = None
) -> Retriever:
    """The retriever a ``RetrievalConfig`` asks for: its server_url, else its default kind."""
    if config.server_url:
        return make_retriever("http", url=config.server_url)
    return make_retriever(
        config.default,
        passages=passages,
        index_root=index_root,
        bm25=config.bm25,
        dense=config.dense,
    )


register_retriever("bm25", bm25_retriever, replace=True)
register_retriever("dense", dense_retriever, replace=True)
register_retriever("http", http_retriever, replace=True)
