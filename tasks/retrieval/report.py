"""What a saved index costs: passages, bytes on disk, and memory to serve it.

A saved index is opened memory-mapped (``index_store.read_passages``, ``bm25.py``, ``dense.py``),
so its files are page cache shared by every process on the machine that opens it, not memory
each process holds; what a process holds of its own is per-query scratch: BM25 sums its words'
scores into one float32 per passage (``bm25s``), then ranks only the passages that matched. Read by
``ragfactory corpus``; docs/corpus.md gives the measured figures.
"""

from __future__ import annotations

import json
from pathlib import Path

from ragfactory.tasks.retrieval.index_store import MANIFEST_FILE

# Per passage, per query in flight: bm25s's score vector (float32).
BM25_QUERY_BYTES_PER_PASSAGE = 4


def index_report(folder: Path) -> dict:
    """One saved index folder: kind, passages, bytes on disk, bytes mapped (shared between
    processes), and the private bytes one query in flight needs."""
    manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    files = manifest.get("files") or {}
    disk = sum(entry["bytes"] for entry in files.values())
    n = int(manifest.get("n_passages") or 0)
    kind = manifest.get("kind", folder.name.split("-", 1)[0])
    per_query = n * BM25_QUERY_BYTES_PER_PASSAGE if kind == "bm25" else 0
    return {
        "index": folder.name,
        "kind": kind,
        "passages": n,
        "disk_bytes": disk,
        "mapped_bytes": disk,
        "private_bytes_per_query": per_query,
        "created_at": manifest.get("created_at"),
    }


def index_reports(root: Path) -> list[dict]:
    """Every saved index under ``root`` (``artifacts/indexes``), newest first."""
    folders = [p.parent for p in root.glob("*/" + MANIFEST_FILE)]
    reports = [index_report(folder) for folder in folders]
    return sorted(reports, key=lambda r: r["created_at"] or "", reverse=True)
