"""What the warehouse knows about its own files: a manifest entry per shard, and ``check``.

Every shard file ``<table>/<col>=<value>/<shard>.parquet`` that ``Warehouse.write`` commits gets a
sidecar ``_manifest/<table>/<col>=<value>/<shard>.parquet.json`` under the root, holding the
file's path relative to the root, its row count, its size in bytes and the sha256 of its bytes. A shard whose file no longer
matches its entry (rows removed, a truncated copy, a file put there by hand) is not trusted: the
build's shard cache runs it again, and ``check`` names it.

Why a sidecar per file rather than one manifest for the root: shards are written concurrently
by many tasks (and by workers on other machines sharing the root), and a sidecar is committed with
the same write-to-temporary-and-rename as its shard, so no lock and no read-modify-write of a
shared file is needed. The sidecars live in their own tree, not beside the shards, so a table's
folder still holds nothing but its Parquet: any reader pointed at it (``read_parquet('nodes/**')``,
polars, ``datasets.load_dataset``) reads data only, and pyarrow's discovery of the whole root skips
``_manifest`` as it skips every ``_`` name. A partition folder deleted by hand leaves its entries
behind, which ``check`` reports as missing files: rows the warehouse wrote are gone.

Why sha256 of the whole file: it detects any change to the bytes, whatever tool made it, and is
independent of Parquet's internals (a rewritten file with the same row count still differs).
Its cost is one pass over the file's bytes: at write time over the temporary file just written
(still in the page cache), and on every verification (``shard_written`` before each build's
shard, ``check`` over the whole root), at hundreds of MB/s per core, small next to producing the
rows. Size is compared first, so a truncated file is caught without hashing it.

Order of a commit (``record_commit``): the old sidecar is removed, the Parquet file is renamed
into place, then the new sidecar is renamed into place. A sidecar therefore only ever describes a
file that is on disk with exactly those bytes; a crash in between leaves a file without an entry,
which counts as unrecorded (not trusted, rebuilt), never a claim about a file that is not there.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from ragfactory.schemas.tables import TABLES

if TYPE_CHECKING:
    from ragfactory.warehouse.store import Warehouse

MANIFEST_DIR = "_manifest"
MANIFEST_SUFFIX = ".json"
MANIFEST_VERSION = 1
_CHUNK = 1 << 20


def manifest_path(root: Path, path: Path) -> Path:
    """The sidecar holding the manifest entry of shard file ``path`` under ``root``."""
    relative = path.relative_to(root)
    return root / MANIFEST_DIR / relative.parent / f"{relative.name}{MANIFEST_SUFFIX}"


def shard_of_manifest(root: Path, sidecar: Path) -> Path:
    """The shard file a sidecar describes."""
    relative = sidecar.relative_to(root / MANIFEST_DIR)
    return root / relative.parent / relative.name[:-len(MANIFEST_SUFFIX)]


def digest(path: Path) -> tuple[int, str]:
    """(size in bytes, sha256 hex) of a file's bytes."""
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return size, sha.hexdigest()


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def entry_for(root: Path, path: Path, rows: int, staged: Path | None = None) -> dict:
    """The manifest entry of ``path`` (whose bytes are, for now, in ``staged`` if given)."""
    size, sha = digest(staged or path)
    return {"version": MANIFEST_VERSION, "path": _relative(root, path), "rows": rows,
            "bytes": size, "sha256": sha}


def _write_json(target: Path, payload: dict) -> None:
    tmp = target.with_name(f"{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(json.dumps(payload, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def record_commit(root: Path, staged: Path, path: Path, rows: int) -> None:
    """Rename the written temporary file ``staged`` over ``path`` and record its entry."""
    entry = entry_for(root, path, rows, staged=staged)
    sidecar = manifest_path(root, path)
    sidecar.unlink(missing_ok=True)
    os.replace(staged, path)
    sidecar.parent.mkdir(parents=True, exist_ok=True)
    _write_json(sidecar, entry)


def read_entry(root: Path, path: Path) -> dict | None:
    """A shard file's manifest entry, or None when it has none (or an unreadable one)."""
    try:
        entry = json.loads(manifest_path(root, path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or not {"path", "rows", "bytes", "sha256"} <= entry.keys():
        return None
    return entry


def mismatch(root: Path, path: Path, entry: dict) -> str | None:
    """How a shard file differs from its manifest entry (size, hash, place), or None."""
    if entry["path"] != _relative(root, path):
        return f"its manifest entry is for {entry['path']}"
    try:
        size = path.stat().st_size
    except OSError as exc:
        return f"cannot be read: {exc}"
    if size != entry["bytes"]:
        return f"{size} bytes, recorded {entry['bytes']}"
    if digest(path)[1] != entry["sha256"]:
        return "its content hash differs from the recorded one"
    return None


def is_intact(root: Path, path: Path) -> bool:
    """Whether a shard file exists and matches its manifest entry (size and hash)."""
    entry = read_entry(root, path)
    return entry is not None and path.exists() and mismatch(root, path, entry) is None


@dataclass(frozen=True)
class Problem:
    """One file of the warehouse that cannot be trusted.

    ``kind`` is ``damaged`` (the file differs from its manifest entry, or is not readable
    Parquet), ``unrecorded`` (a shard file with no manifest entry) or ``missing`` (an entry whose
    file is gone). ``path`` is relative to the warehouse root.
    """

    table: str
    path: str
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.path} ({self.table}): {self.detail}"


def _parquet_rows(path: Path) -> tuple[int | None, str | None]:
    """(row count, None) of a readable Parquet file, or (None, why it cannot be read)."""
    try:
        return pq.read_table(path).num_rows, None
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is unusable
        return None, f"not readable as Parquet: {type(exc).__name__}: {exc}"


def check_file(root: Path, table: str, path: Path) -> Problem | None:
    """The problem with one shard file, or None when it matches its entry and reads back."""
    relative = _relative(root, path)
    entry = read_entry(root, path)
    rows, unreadable = _parquet_rows(path)
    if entry is None:
        held = unreadable or f"{rows} rows"
        return Problem(table, relative, "unrecorded", f"no manifest entry; {held}")
    differs = mismatch(root, path, entry)
    if differs is None and unreadable is None and rows == entry["rows"]:
        return None
    found = unreadable or (f"{rows} rows, recorded {entry['rows']}" if rows != entry["rows"] else None)
    return Problem(table, relative, "damaged", "; ".join(p for p in (differs, found) if p))


def check(warehouse: Warehouse) -> list[Problem]:
    """Every damaged, unrecorded or missing shard file of every table, in path order."""
    root = warehouse.root
    problems = []
    for table in TABLES:
        for path in warehouse.files(table):
            problem = check_file(root, table, path)
            if problem:
                problems.append(problem)
        for sidecar in sorted((root / MANIFEST_DIR / table).rglob(f"*.parquet{MANIFEST_SUFFIX}")):
            path = shard_of_manifest(root, sidecar)
            if not path.exists():
                problems.append(Problem(table, _relative(root, path), "missing",
                                        "the manifest records it but the file is gone"))
    return sorted(problems, key=lambda p: p.path)
