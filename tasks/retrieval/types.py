"""The retrieval contract every index, server and client shares (docs/architecture.md, "Core contracts").

A ``Retriever`` answers a batch of queries at once with the top ``k`` passages per query, best
first. Passages travel between processes in the Search-R1 / FlashRAG corpus format, where a
document's ``contents`` is the quoted title, a newline, then the text (Search-R1, Jin et al.
2025, retrieval server); ``format_contents`` and ``parse_contents`` convert both ways.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ragfactory.tasks.data.corpus import parse_contents

__all__ = ["Hit", "RetrievalError", "Retriever", "check_k", "format_contents", "parse_contents"]


@dataclass(frozen=True)
class Hit:
    """One retrieved passage and its score under the retriever that found it (higher is better)."""

    passage_id: str
    title: str
    text: str
    score: float

    @property
    def contents(self) -> str:
        return format_contents(self.title, self.text)


@runtime_checkable
class Retriever(Protocol):
    """Anything that answers many queries in one call: one list of at most ``k`` hits per query."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]: ...


class RetrievalError(RuntimeError):
    """A retriever could not answer (unreachable server, malformed reply, unusable index)."""


def format_contents(title: str, text: str) -> str:
    """``"Title"\\ntext``, the document layout of Search-R1 and FlashRAG corpora."""
    return f'"{title}"\n{text}'


def check_k(k: int) -> int:
    """Refuse a non-positive or non-integer ``k`` with an error naming it."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    return int(k)
