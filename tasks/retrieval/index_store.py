"""Passages for indexing, content keys, and the on-disk folders that hold built indexes.

An index folder is named after a key that hashes the passages (ids, titles, texts) and the
settings that shape the index, so a rebuild with the same inputs loads the saved index instead
of building it again, and any change of corpus, parameters or model lands in a new folder. A
folder is written under a temporary name and renamed into place, so a crash never leaves a
half-written index that a later run would load. The passages are stored beside the index as
Parquet so a loaded index returns hits without the warehouse.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ragfactory.atomic import atomic_dir
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.warehouse.integrity import files_damage, folder_files

PASSAGE_COLUMNS = ("passage_id", "title", "text")
PASSAGES_FILE = "passages.parquet"
MANIFEST_FILE = "manifest.json"
# Bumped when the saved layout changes, so old folders are rebuilt rather than misread.
FORMAT_VERSION = 1

T = TypeVar("T")


def select_passages(passages: pa.Table) -> pa.Table:
    """The passage_id, title and text columns as strings; a null title becomes ''.

    Refuses an empty table, missing columns, null ids or texts, and duplicate ids, naming the
    column and the first offending row or id.
    """
    missing = [c for c in PASSAGE_COLUMNS if c not in passages.column_names]
    if missing:
        raise ValueError(f"passages: missing column(s) {missing}; have {passages.column_names}")
    if passages.num_rows == 0:
        raise ValueError("passages: no rows to index")
    columns = {c: passages.column(c).cast(pa.large_string()) for c in PASSAGE_COLUMNS}
    for name in ("passage_id", "text"):
        if columns[name].null_count:
            row = pc.index(pc.is_null(columns[name]), True).as_py()
            raise ValueError(f"passages.{name}: null at row {row}")
    columns["title"] = pc.fill_null(columns["title"], "")
    counts = pc.value_counts(columns["passage_id"])
    repeated = counts.filter(pc.greater(counts.field("counts"), 1))
    if len(repeated):
        raise ValueError(f"passages.passage_id: duplicate id {repeated[0]['values'].as_py()!r}")
    return pa.table({c: columns[c].combine_chunks() for c in PASSAGE_COLUMNS})


def content_key(passages: pa.Table, settings: Mapping) -> str:
    """A hash of the passages (in order) and the index settings; 24 hex digits."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"format": FORMAT_VERSION, **settings}, sort_keys=True).encode())
    for name in PASSAGE_COLUMNS:
        _hash_strings(digest, passages.column(name).cast(pa.large_string()).combine_chunks())
    return digest.hexdigest()[:24]


def _hash_strings(digest, array: pa.Array) -> None:
    # Hashing the Arrow buffers (lengths, then bytes) keeps this vectorised for large corpora.
    _, offsets_buf, data_buf = array.buffers()
    if not len(array):
        return
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)
    offsets = offsets[array.offset : array.offset + len(array) + 1]
    digest.update(np.diff(offsets).astype("<i8").tobytes())
    if data_buf is not None:
        digest.update(memoryview(data_buf)[offsets[0] : offsets[-1]])


def hits_from_rows(passages: pa.Table, rows: np.ndarray, scores: np.ndarray) -> list[list[Hit]]:
    """Hits for a (queries x k) array of passage row numbers; rows < 0 (no match) are dropped."""
    rows, scores = np.asarray(rows), np.asarray(scores)
    taken = passages.take(pa.array(np.clip(rows, 0, None).ravel(), type=pa.int64()))
    ids, titles, texts = (taken.column(c).to_pylist() for c in ("passage_id", "title", "text"))
    width = rows.shape[1]
    out: list[list[Hit]] = []
    for q in range(rows.shape[0]):
        base = q * width
        out.append([
            Hit(ids[base + j], titles[base + j], texts[base + j], float(scores[q, j]))
            for j in range(width) if rows[q, j] >= 0
        ])
    return out


def write_passages(passages: pa.Table, folder: Path) -> None:
    rows = passages.select(list(PASSAGE_COLUMNS))
    pq.write_table(rows, folder / PASSAGES_FILE, compression="zstd")


def read_passages(folder: Path) -> pa.Table:
    return pq.read_table(folder / PASSAGES_FILE).combine_chunks()


def read_manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))


def index_folder(root: str | os.PathLike, kind: str, key: str) -> Path:
    return Path(root) / f"{kind}-{key}"


def folder_damage(folder: Path) -> str | None:
    """How a saved index folder differs from the files its manifest records, or None."""
    return files_damage(folder, read_manifest(folder).get("files"))


def set_aside(folder: Path) -> Path:
    """Move a damaged index folder out of the way (``_quarantine/`` beside it); returns where."""
    target = folder.parent / "_quarantine" / f"{folder.name}-{uuid.uuid4().hex[:8]}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(folder, target)
    return target


def load_or_build(
    folder: Path,
    build: Callable[[], T],
    save: Callable[[T, Path], None],
    load: Callable[[Path], T],
    manifest: Mapping,
) -> tuple[T, bool]:
    """The index saved in ``folder`` if there is one, else a new one saved there atomically.

    Returns the index and whether it was loaded. If another process finishes the same folder
    first, its copy is kept and ours is discarded: both hold the same content by construction.
    The manifest records every file's size and sha256; a saved folder with a file missing or of
    another size is set aside (``set_aside``, with a warning naming the file) and built again.
    """
    if (folder / MANIFEST_FILE).is_file():
        damage = folder_damage(folder)
        if damage is None:
            return load(folder), True
        aside = set_aside(folder)
        logging.getLogger(__name__).warning("index %s is damaged (%s): moved to %s and built again",
                                            folder, damage, aside)
    index = build()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(folder, finished=lambda f: (f / MANIFEST_FILE).is_file()) as tmp:
        tmp.mkdir()
        save(index, tmp)
        stamp = {**manifest, "created_at": datetime.now(UTC).isoformat(), "files": folder_files(tmp, exclude=(MANIFEST_FILE,))}
        text = json.dumps(stamp, indent=2, sort_keys=True)
        (tmp / MANIFEST_FILE).write_text(text, encoding="utf-8")
    return index, False
