"""The version of one ingest: a short hash of the source file's bytes and the options that shape
its rows (docs/architecture.md, "The data flow": ingest).

Why versions. Several builds read one warehouse root, each with its own idea of a dataset: the
full HotpotQA file, its first 3 questions, a corrected copy. Before, the ingest of each replaced
the dataset's shard, so a limit-3 build left 3 of 500 questions for every earlier run. Now an
ingest only adds rows (``Warehouse.merge``: the shards are the union of everything ingested,
keyed by question and passage id, so the ``questions`` and ``passages`` views never show a row
twice), and what one ingest produced is an ``ingests`` row named by its version: its question
ids and counts. A run records the versions it read (``runs.inputs``) and expands only their
questions, so a limit-3 build into a root holding all 500 still expands its 3, and an earlier
run's questions stay in the table.

Why a content hash rather than a counter or a timestamp: the same file with the same options is
the same version on every machine and every day, so ingesting it again is recognised and skipped
(its ``ingests`` row is already there), and two builds racing on it agree on the name. Why these
options: each one changes which rows land or what they hold (format: the parser; split: the
rows' ``split``; limit: which questions; partition rule: their ``partition``; the passage size
limit: which passages are rejected). The file is hashed in 1 MiB blocks, never read whole.

Alternatives weighed: one shard per version (the table grows a copy of every question per
limit tried, and the views show duplicates that users' ``count(*)`` would count); a Delta or
DuckLake table (a table format for the whole warehouse, weighed in ``warehouse/integrity.py``,
which this does not pre-empt: the ``ingests``
rows map onto either's snapshots).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

VERSION_HEX_CHARS = 16  # 64 bits, as passage ids: no collision expected among a root's ingests
_BLOCK = 1 << 20


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def ingest_version(source_sha256: str, options: dict) -> str:
    """The version of one ingest: the first 16 hex digits of sha256(file hash, options as JSON).

    >>> ingest_version("0" * 64, {"limit": 3})
    '358d5b7cb6fc65e2'
    """
    payload = json.dumps({"source": source_sha256, "options": options}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:VERSION_HEX_CHARS]


def empty_source_warning(kind: str, name: str, path: Path, n_rows: int, n_rejects: int) -> str | None:
    """The warning of an ingest that loaded nothing: a 0-byte file, or one whose every line is
    a reject (a success with no rows would otherwise pass unnoticed)."""
    if path.stat().st_size == 0:
        return f"{kind} {name}: {path} is empty (0 bytes); nothing ingested"
    if n_rows == 0:
        return f"{kind} {name}: no rows loaded from {path} ({n_rejects} reject(s); see the rejects table)"
    return None


def moved_partitions_warning(name: str, n_kept: int) -> str | None:
    """The warning of an ingest whose partition rule would move questions an earlier ingest
    placed: they keep their partition (a question held out stays held out)."""
    if not n_kept:
        return None
    return (
        f"dataset {name}: {n_kept} question(s) keep the partition an earlier ingest gave them; "
        "this config's partition rule would move them, and partitions never move (use the "
        "earlier rule, or a new warehouse root)"
    )
