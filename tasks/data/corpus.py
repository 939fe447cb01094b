"""Load a user's retrieval corpus (Search-R1 / FlashRAG JSONL) into ``passages`` rows.

The retrieval corpus of docs/architecture.md, "The data flow" (questions, passages -> BM25 / dense indexes).
Search-R1 and FlashRAG ship Wikipedia as ``{"id": ..., "contents": "\\"Title\\"\\ntext"}``: the
title in double quotes on the first line, the text after it. DPR-style rows with separate
``title`` and ``text`` fields are read too. The user's id is kept as the passage id so that
retrieval results stay comparable with the papers' setups. A corpus of millions of passages
is read in batches by :func:`iter_corpus`, one warehouse shard per batch; the ids met so far are
kept as sorted 64-bit hashes (``SeenIds``, 8 bytes a passage) rather than a set of strings, so
wiki-18's 21 M ids cost ~170 MB, not gigabytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ragfactory.tasks.data.formats import require_id
from ragfactory.tasks.data.jsonl import JsonlLimits, RowError, make_reject, read_lines, type_name
from ragfactory.tasks.data.loaders import LoadResult
from ragfactory.tasks.data.passages import make_passage, oversize

BATCH_SIZE = 100_000  # ~50 MB of Wikipedia text: one shard, small enough to hold in memory
RECENT_IDS = 100_000  # hashes kept in a set before they join the sorted array (one batch's worth)


class SeenIds:
    """The passage ids met so far, as 64-bit blake2b hashes: a set of recent ones, merged into
    a sorted array every ``RECENT_IDS``. Two distinct ids share a hash with probability
    ~n²/2^65 (1e-5 for 21 M ids); such an id would be rejected as a duplicate."""

    def __init__(self, recent_limit: int = RECENT_IDS):
        self.sorted = np.empty(0, dtype=np.uint64)
        self.recent: set[int] = set()
        self.recent_limit = recent_limit

    def add(self, pid: str) -> bool:
        """Record ``pid``; False when it was met before."""
        h = int.from_bytes(hashlib.blake2b(pid.encode("utf-8"), digest_size=8).digest(), "little")
        if h in self.recent:
            return False
        i = int(np.searchsorted(self.sorted, np.uint64(h)))
        if i < len(self.sorted) and int(self.sorted[i]) == h:
            return False
        self.recent.add(h)
        if len(self.recent) >= self.recent_limit:
            new = np.array(sorted(self.recent), dtype=np.uint64)
            self.sorted = np.insert(self.sorted, np.searchsorted(self.sorted, new), new)
            self.recent.clear()
        return True

    def __len__(self) -> int:
        return len(self.sorted) + len(self.recent)


def parse_contents(contents: str) -> tuple[str, str]:
    """Split ``'"Title"\\ntext'`` into (title, text); without a quoted title line, title is "".

    >>> parse_contents('"Paris"\\nParis is the capital of France.')
    ('Paris', 'Paris is the capital of France.')
    >>> parse_contents("no title line")
    ('', 'no title line')
    """
    first, newline, rest = contents.partition("\n")
    first = first.strip()
    if newline and len(first) >= 2 and first[0] == first[-1] == '"':
        return first[1:-1].strip(), rest.strip()
    return "", contents.strip()


def parse_corpus_record(record: dict) -> tuple[str, str, str]:
    """(id, title, text) of one corpus row, or :class:`RowError` naming the field at fault."""
    pid = require_id(record, "id")
    if "contents" in record:
        contents = record["contents"]
        if not isinstance(contents, str):
            raise RowError(f"field 'contents' must be a string, got {type_name(contents)}")
        title, text = parse_contents(contents)
        name = "contents"
    elif "text" in record:
        title, text = record.get("title") or "", record["text"]
        if not isinstance(title, str) or not isinstance(text, str):
            raise RowError("fields 'title' and 'text' must be strings")
        title, text, name = title.strip(), text.strip(), "text"
    else:
        raise RowError("missing field 'contents'")
    if not text and not title:
        raise RowError(f"empty field '{name}'")
    return pid, title, text


def iter_corpus(
    path: Path,
    source: str,
    batch_size: int = BATCH_SIZE,
    limits: JsonlLimits = JsonlLimits(),
) -> Iterator[LoadResult]:
    """Yield the corpus in batches of up to ``batch_size`` passages with the rejects met so far.

    A duplicate id within the file is rejected; the first passage with that id is kept. A
    passage over ``limits.max_passage_chars`` is a reject naming its id and size.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rejects: list[dict] = []
    batch: list[dict] = []
    seen = SeenIds()
    for line in read_lines(path, source, rejects, limits):
        try:
            pid, title, text = parse_corpus_record(line.record)
            if not seen.add(pid):
                raise RowError(f"duplicate id '{pid}'")
        except RowError as exc:
            rejects.append(make_reject(source, str(path), line.number, str(exc), line.text, limits))
            continue
        passage = make_passage(source, title, text, pid)
        if (reason := oversize(passage, limits)) is not None:
            rejects.append(make_reject(source, str(path), line.number, reason, line.text, limits))
            continue
        batch.append(passage)
        if len(batch) >= batch_size:
            yield LoadResult(passages=batch, rejects=list(rejects))
            batch = []
            rejects.clear()  # read_lines keeps appending to this same list
    if batch or rejects:
        yield LoadResult(passages=batch, rejects=list(rejects))


def load_corpus(path: Path, source: str, limits: JsonlLimits = JsonlLimits()) -> LoadResult:
    """The whole corpus as one result (passages and rejects); for small corpora and tests."""
    result = LoadResult()
    for batch in iter_corpus(path, source, limits=limits):
        result.passages.extend(batch.passages)
        result.rejects.extend(batch.rejects)
    return result


def corpus_lines(path: Path, ids: set[str], limits: JsonlLimits = JsonlLimits()) -> dict[str, tuple[int, str]]:
    """(line number, line text) of the first line of each of ``ids`` in a corpus file (the line
    its passage came from: a later line with the same id is rejected at ingest)."""
    found: dict[str, tuple[int, str]] = {}
    for line in read_lines(path, "", [], limits):
        try:
            pid = require_id(line.record, "id")
        except RowError:
            continue
        if pid in ids and pid not in found:
            found[pid] = (line.number, line.text)
            if len(found) == len(ids):
                break
    return found
