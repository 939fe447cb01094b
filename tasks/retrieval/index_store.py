"""Passages for indexing, content keys, and the on-disk folders that hold built indexes.

An index folder is named after a key that hashes the passages (ids, titles, texts) and the
settings that shape the index, so a rebuild with the same inputs loads the saved index instead
of building it again, and any change of corpus, parameters or model lands in a new folder. A
folder is written under a temporary name and renamed into place, so a crash never leaves a
half-written index that a later run would load. The passages are stored beside the index as an
uncompressed Arrow IPC file, written batch by batch and opened memory-mapped: a loaded index
returns hits without the warehouse, and every process on a machine that opens it shares one copy
of the passages through the page cache instead of holding its own (docs/corpus.md).

Passages reach an index as a ``PassageSource``: batches in a stable order plus a content digest.
A table in memory is one (``TablePassages``); the warehouse's corpus is another
(``tasks/retrieval/corpus.py``), read in batches so no process holds the whole corpus at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ragfactory.atomic import atomic_dir
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.warehouse.integrity import files_damage, folder_files

PASSAGE_COLUMNS = ("passage_id", "title", "text")
PASSAGES_FILE = "passages.arrow"
MANIFEST_FILE = "manifest.json"
# Bumped when the saved layout changes, so old folders are rebuilt rather than misread.
# 2: passages as memory-mapped Arrow IPC, BM25 as .npy arrays, keys hashed batch by batch.
FORMAT_VERSION = 2
BATCH_ROWS = 25_000  # passages per batch when indexing: ~18 MB of text, ~150 MB with its tokens

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


class PassageDigest:
    """A sha256 of passages fed in batches, the same for any split of them into batches.

    Each column's lengths and bytes go to digests of their own, so no batch boundary shows in
    the result and no column's bytes can slide into its neighbour's unnoticed.
    """

    def __init__(self):
        self._parts = {f"{c}.{p}": hashlib.sha256() for c in PASSAGE_COLUMNS for p in ("len", "bytes")}
        self.rows = 0

    def update(self, batch: pa.Table) -> None:
        for name in PASSAGE_COLUMNS:
            array = batch.column(name).cast(pa.large_string()).combine_chunks()
            _hash_strings(self._parts[f"{name}.len"], self._parts[f"{name}.bytes"], array)
        self.rows += batch.num_rows

    def hexdigest(self) -> str:
        whole = hashlib.sha256(str(self.rows).encode())
        for part in self._parts.values():
            whole.update(part.digest())
        return whole.hexdigest()


def _hash_strings(lengths, data, array: pa.Array) -> None:
    # Hashing the Arrow buffers (lengths, then bytes) keeps this vectorised for large corpora.
    _, offsets_buf, data_buf = array.buffers()
    if not len(array):
        return
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)
    offsets = offsets[array.offset : array.offset + len(array) + 1]
    lengths.update(np.diff(offsets).astype("<i8").tobytes())
    if data_buf is not None:
        data.update(memoryview(data_buf)[offsets[0] : offsets[-1]])


@runtime_checkable
class PassageSource(Protocol):
    """Passages to index: ``batches()`` yields tables of PASSAGE_COLUMNS in a stable order, and
    ``digest()`` is the ``PassageDigest`` of everything ``batches()`` yields."""

    def batches(self) -> Iterator[pa.Table]: ...

    def digest(self) -> str: ...


class TablePassages:
    """A ``PassageSource`` over a table already in memory (checked by ``select_passages``)."""

    def __init__(self, passages: pa.Table, batch_rows: int = BATCH_ROWS):
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
        self.table = select_passages(passages)
        self.batch_rows = batch_rows
        self._digest: str | None = None

    def batches(self) -> Iterator[pa.Table]:
        for start in range(0, self.table.num_rows, self.batch_rows):
            yield self.table.slice(start, self.batch_rows)

    def digest(self) -> str:
        if self._digest is None:
            self._digest = digest_batches(self.batches())
        return self._digest


class ParquetPassages:
    """A ``PassageSource`` over a Parquet file or folder of passages, ``batch_rows`` at a time."""

    def __init__(self, path: str | os.PathLike, batch_rows: int = BATCH_ROWS):
        self.files, self.batch_rows = ds.dataset(str(path), format="parquet"), batch_rows
        self.num_rows = self.files.count_rows()
        self._digest: str | None = None

    def batches(self) -> Iterator[pa.Table]:
        for batch in self.files.to_batches(
            columns=list(PASSAGE_COLUMNS), batch_size=self.batch_rows, use_threads=False
        ):  # one order, every read
            if batch.num_rows:
                yield select_passages(pa.Table.from_batches([batch]))

    def digest(self) -> str:
        if self._digest is None:
            self._digest = digest_batches(self.batches())
        return self._digest


def as_source(passages: pa.Table | PassageSource) -> PassageSource:
    """``passages`` as a ``PassageSource``: a table is wrapped, a source passed through."""
    return passages if isinstance(passages, PassageSource) else TablePassages(passages)


def digest_batches(batches: Iterable[pa.Table]) -> str:
    digest = PassageDigest()
    for batch in batches:
        digest.update(batch)
    return digest.hexdigest()


def content_key(passages: pa.Table | PassageSource, settings: Mapping) -> str:
    """A hash of the passages (in order) and the index settings; 24 hex digits."""
    whole = hashlib.sha256()
    whole.update(json.dumps({"format": FORMAT_VERSION, **settings}, sort_keys=True).encode())
    whole.update(as_source(passages).digest().encode())
    return whole.hexdigest()[:24]


def take_rows(passages: pa.Table, rows: np.ndarray) -> dict[str, list]:
    """The PASSAGE_COLUMNS values of the given row numbers, as lists in the order asked.

    Each row is taken from its own record batch: ``Table.take`` on a table of many batches
    first concatenates every column, which would copy a memory-mapped corpus into memory.
    """
    batches = passages.to_batches()
    starts = np.cumsum([0] + [b.num_rows for b in batches])
    which = np.searchsorted(starts, rows, side="right") - 1
    out: dict[str, list] = {c: [None] * len(rows) for c in PASSAGE_COLUMNS}
    for b in np.unique(which).tolist():
        wanted = np.nonzero(which == b)[0]
        part = batches[b].take(pa.array(rows[wanted] - starts[b], type=pa.int64()))
        for name in PASSAGE_COLUMNS:
            for i, value in zip(wanted.tolist(), part.column(name).to_pylist()):
                out[name][i] = value
    return out


def hits_from_rows(passages: pa.Table, rows: np.ndarray, scores: np.ndarray) -> list[list[Hit]]:
    """Hits for a (queries x k) array of passage row numbers; rows < 0 (no match) are dropped."""
    rows, scores = np.asarray(rows), np.asarray(scores)
    taken = take_rows(passages, np.clip(rows, 0, None).ravel())
    ids, titles, texts = (taken[c] for c in ("passage_id", "title", "text"))
    width = rows.shape[1]
    out: list[list[Hit]] = []
    for q in range(rows.shape[0]):
        base = q * width
        out.append(
            [
                Hit(ids[base + j], titles[base + j], texts[base + j], float(scores[q, j]))
                for j in range(width)
                if rows[q, j] >= 0
            ]
        )
    return out


def write_passages(batches: Iterable[pa.Table], folder: Path) -> int:
    """Write passages batch by batch as an uncompressed Arrow IPC file; returns the row count.

    Uncompressed so ``read_passages`` maps the file instead of decoding it into memory.
    """
    schema = pa.schema([(c, pa.large_string()) for c in PASSAGE_COLUMNS])
    rows = 0
    with pa.OSFile(str(folder / PASSAGES_FILE), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_table(batch.select(list(PASSAGE_COLUMNS)).cast(schema))
            rows += batch.num_rows
    return rows


def read_passages(folder: Path) -> pa.Table:
    """The passages saved with an index, memory-mapped: pages are read when a hit needs them
    and shared with every other process that opened the same index."""
    return pa.ipc.open_file(pa.memory_map(str(folder / PASSAGES_FILE))).read_all()


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
    built: list[T] = []

    def write(tmp: Path) -> dict:
        built.append(build())
        save(built[0], tmp)
        return {}

    found = load_saved(folder)
    if found is not None:
        return load(folder), True
    write_folder(folder, write, manifest)
    return built[0], False


def load_or_write(
    folder: Path, write: Callable[[Path], Mapping], load: Callable[[Path], T], manifest: Mapping
) -> tuple[T, bool]:
    """Like ``load_or_build`` for an index written straight to disk as it is built (a corpus
    too large to hold): ``write(tmp)`` fills the temporary folder and returns manifest fields
    known only once written (a row count); the result is then loaded from ``folder``."""
    if load_saved(folder) is None:
        write_folder(folder, write, manifest)
        return load(folder), False
    return load(folder), True


def load_saved(folder: Path) -> Path | None:
    """``folder`` when it holds an intact saved index; a damaged one is set aside (None)."""
    if not (folder / MANIFEST_FILE).is_file():
        return None
    damage = folder_damage(folder)
    if damage is None:
        return folder
    aside = set_aside(folder)
    logging.getLogger(__name__).warning("index %s is damaged (%s): moved to %s and built again", folder, damage, aside)
    return None


def write_folder(folder: Path, write: Callable[[Path], Mapping], manifest: Mapping) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(folder, finished=lambda f: (f / MANIFEST_FILE).is_file()) as tmp:
        tmp.mkdir()
        extra = write(tmp)
        stamp = {
            **manifest,
            **extra,
            "created_at": datetime.now(UTC).isoformat(),
            "files": folder_files(tmp, exclude=(MANIFEST_FILE,)),
        }
        text = json.dumps(stamp, indent=2, sort_keys=True)
        (tmp / MANIFEST_FILE).write_text(text, encoding="utf-8")
