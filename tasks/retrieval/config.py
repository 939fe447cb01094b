"""Parameters of the retrievers: the default kind, top-k, BM25 and dense index settings.

The ``retrieval`` section of the build and evaluate configs (``flows/config.py``), beside the
retrievers it configures. A kind is a built-in or one plugged into ``tasks/retrieval/factory.py``
as ``<plugin>:<name>``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from ragfactory.plugins import builtin_or_plugged
from ragfactory.schemas.config import Section


class BM25Config(Section):
    enabled: bool = True
    k1: float = Field(1.5, description="bm25s default term-frequency saturation")
    b: float = Field(0.75, description="bm25s default length normalisation")


class DenseConfig(Section):
    enabled: bool = True
    model: str = Field(
        "all-MiniLM-L6-v2",
        description="sentence-transformers model: a local path, or all-MiniLM-L6-v2 (shipped offline)",
    )
    batch_size: int = Field(64, ge=1)
    ivf_threshold: int = Field(200_000, description="Above this many passages use an IVF index instead of flat IP")
    device: str | None = Field(None, description="cpu, cuda, or None to pick automatically")


BUILTIN_RETRIEVERS = ("bm25", "dense", "http")


def retriever_kind(name: str) -> str:
    """``name`` if it is a built-in retriever kind or a plugged one, ``<plugin>:<name>``
    (registered in ``tasks/retrieval/factory.py``)."""
    return builtin_or_plugged(name, BUILTIN_RETRIEVERS, "retriever kind", "retriever")


class RetrievalConfig(Section):
    default: Annotated[str, AfterValidator(retriever_kind)] = Field(
        "bm25", description="bm25, dense, or a retriever registered as '<plugin>:<name>'"
    )
    top_k: int = Field(3, ge=1, description="DecEx-RAG and TreePS-RAG retrieve the top 3 passages")
    bm25: BM25Config = BM25Config()
    dense: DenseConfig = DenseConfig()
    server_url: str | None = Field(
        None, description="Use an existing Search-R1-style retrieval server instead of local indexes"
    )
