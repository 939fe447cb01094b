"""Passage rows and their content-addressed ids (docs/architecture.md, "The data flow").

Benchmark paragraphs carry no id of their own, and the same Wikipedia paragraph appears as a
distractor under many questions and in several datasets. Its id is therefore a hash of title and
text, so the corpus the retrievers index holds each paragraph once, whichever file it came from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

ID_HEX_CHARS = 16  # 64 bits: no collision expected below billions of passages


def passage_id(title: str, text: str) -> str:
    """The stable id of a paragraph: the first 16 hex digits of sha1(title + "\\n" + text).

    >>> passage_id("Paris", "Paris is the capital of France.")
    '11651935d56413fd'
    """
    digest = hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()
    return digest[:ID_HEX_CHARS]


def make_passage(source: str, title: str, text: str, pid: str | None = None) -> dict:
    """A ``passages`` row; without ``pid`` the id is the content hash of title and text."""
    return {
        "passage_id": pid if pid is not None else passage_id(title, text),
        "source": source,
        "title": title,
        "text": text,
    }


def dedupe_passages(rows: Iterable[dict]) -> list[dict]:
    """The rows with the first of each ``passage_id`` kept, in their original order."""
    kept: dict[str, dict] = {}
    for row in rows:
        kept.setdefault(row["passage_id"], row)
    return list(kept.values())


def oversize(passage: dict, limits) -> str | None:
    """The reject reason of a ``passages`` row longer than ``limits.max_passage_chars`` (title
    and text together), naming its id and size; None when it fits."""
    size = len(passage["title"]) + len(passage["text"])
    if size <= limits.max_passage_chars:
        return None
    return f"passage {passage['passage_id']} is {size:,} chars, over max_passage_chars {limits.max_passage_chars:,}"
