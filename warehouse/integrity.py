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

Order of a commit (``commit_shard``): the old sidecar is removed, the Parquet file is renamed
into place, then the new sidecar is renamed into place. A sidecar therefore only ever describes a
file that is on disk with exactly those bytes; a crash in between leaves a file without an entry,
which counts as unrecorded (not trusted, rebuilt), never a claim about a file that is not there.

Why our own manifest rather than a table format (Delta Lake, DuckLake). Both give atomic
commits, snapshots and concurrent writers, and both name a truncated file when it is read; but
neither verifies a file against what it committed (DuckLake's ``count(*)`` even answers from its
metadata for a file that is gone), neither repairs, and each adds what this warehouse would have
to carry: Delta's ``deltalake`` wheel is 129 MB and its log is a second way to read every table;
DuckLake's extension loads only in duckdb 1.5.5, while the project runs 2.0. What the warehouse
needs — one shard replaced whole by its one writer, never two writers of one file (ingested
inputs, the one shared shard kind, merge under a lock, ``warehouse.locks``) — is met by
rename-commits plus these entries, and every Parquet reader still reads the folders as they are.
A table format becomes the better answer when writers share shards across machines (an object
store has no rename and no flock). An object-store warehouse (``warehouse.objectstore``) keeps
one writer per shard, so whole-object PUTs plus these entries are enough there too: the entries
travel with the shards and a mirror checks every object against its entry as it pulls it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from ragfactory.atomic import atomic_path, atomic_write_text
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
    return root / relative.parent / relative.name[: -len(MANIFEST_SUFFIX)]


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
    return {"version": MANIFEST_VERSION, "path": _relative(root, path), "rows": rows, "bytes": size, "sha256": sha}


def _write_json(target: Path, payload: dict) -> None:
    atomic_write_text(target, json.dumps(payload, sort_keys=True) + "\n")


@contextmanager
def commit_shard(root: Path, path: Path, rows: int | None) -> Iterator[Path]:
    """A temporary file beside shard ``path`` for the block to write its ``rows`` rows into;
    when the block ends without an error, it is renamed over ``path`` and its entry recorded.

    If the block raises, the temporary is removed and ``path`` and its entry stay as they were.
    """
    sidecar = manifest_path(root, path)
    with atomic_path(path) as staged:
        yield staged
        entry = entry_for(root, path, rows, staged=staged)
        sidecar.unlink(missing_ok=True)
    sidecar.parent.mkdir(parents=True, exist_ok=True)
    _write_json(sidecar, entry)


def committed(path: Path, root: Path | None, rows: int | None = None):
    """``commit_shard`` of a file beside the shards (a trainer file, a dataset card: ``rows`` None
    when it is not a table) under a warehouse ``root``; without one, a plain atomic write."""
    return atomic_path(path) if root is None else commit_shard(root, path, rows)


def forget(root: Path | None, path: Path) -> None:
    """Remove a file and, under a warehouse ``root``, its manifest entry (the entry first)."""
    if root is not None:
        manifest_path(root, path).unlink(missing_ok=True)
    path.unlink(missing_ok=True)


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


def quick_damage(root: Path, path: Path, footer: bool = False) -> str | None:
    """Why a shard file cannot be what the warehouse wrote, judged without reading its data: its
    size differs from its manifest entry's, or (with ``footer``) its Parquet footer does not read.
    None for a file that passes (or has no entry: a file written before manifests, which
    ``check`` reports).

    The size test is what every connection pays per file before it reads a table (a ``stat`` and
    a small JSON read), so a truncated or rewritten file fails its table's queries by name instead
    of being read; the footer is read only to name the file DuckDB could not read; a same-size
    change of content is left to ``check``, which hashes every byte.
    """
    entry = read_entry(root, path)
    if entry is not None:
        try:
            size = path.stat().st_size
        except OSError as exc:
            return f"cannot be read: {exc}"
        if size != entry["bytes"]:
            # a writer replaces the file, then its entry: read the entry again before blaming it
            again = read_entry(root, path)
            if again is None or again["bytes"] != entry["bytes"]:
                return None
            return f"{size} bytes, recorded {entry['bytes']}"
    return _footer_problem(path) if footer else None


def _footer_problem(path: Path) -> str | None:
    try:
        pq.read_metadata(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is unusable
        return f"not readable as Parquet: {first_line(exc)}"
    return None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def damaged_files(warehouse: Warehouse, table: str, footer: bool = False) -> list[tuple[str, str, str]]:
    """(kind, path relative to the root, why) for each file of ``table`` that ``quick_damage``
    refuses (kind ``damaged``)."""
    root = warehouse.root
    found = []
    for path in warehouse.files(table):
        why = quick_damage(root, path, footer)
        if why:
            found.append(("damaged", _relative(root, path), why))
    return found


def lost_files(warehouse: Warehouse, table: str) -> list[tuple[str, str, str]]:
    """(kind, path relative to the root, why) for each shard of ``table`` whose manifest entry
    has no file: ``quarantined`` by a repair not finished yet, or ``missing`` (deleted). Its rows
    are not in the table, so an answer from the table's files alone is not the whole table.

    A listing of the table's entries and a ``stat`` per entry: a commit writes an entry only after
    its file is in place, so an entry without a file is never a write in progress."""
    return lost_under(warehouse.root, table)


def lost_under(root: Path, table: str) -> list[tuple[str, str, str]]:
    """``lost_files`` of the warehouse at ``root``."""
    return [(p.kind, p.path, p.detail) for p in _lost(root, table)]


def _lost(root: Path, table: str) -> list[Problem]:
    """The ``quarantined`` or ``missing`` problem of each recorded shard of ``table`` that is gone."""
    sidecars = sorted((root / MANIFEST_DIR / table).rglob(f"*.parquet{MANIFEST_SUFFIX}"))
    paths = (shard_of_manifest(root, sidecar) for sidecar in sidecars)
    return [gone(root, table, path) for path in paths if not path.exists()]


def damage_message(warehouse: Warehouse, table: str, damaged: list[tuple[str, str, str]]) -> str:
    """One line: the table, its first damaged (or quarantined, or missing) file and why, and the
    commands that help."""
    return damage_line(warehouse.root, table, damaged)


def damage_line(root: Path, table: str, damaged: list[tuple[str, str, str]]) -> str:
    """``damage_message`` of the warehouse at ``root``."""
    kind, path, why = damaged[0]
    more = f" and {len(damaged) - 1} more file(s)" if len(damaged) > 1 else ""
    return (
        f"table {table} cannot be read: {kind} file {path} ({why}){more}; "
        f"list the damage with `ragfactory check --root {root}`, "
        f"rebuild it with `ragfactory check --repair --root {root}`"
    )


def folder_files(folder: Path, exclude: tuple[str, ...] = ()) -> dict[str, dict]:
    """{path relative to the folder: {"bytes", "sha256"}} of every file in it but ``exclude``:
    what a folder-shaped artifact (a saved index) records of itself in its own manifest."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in exclude):
        size, sha = digest(path)
        files[path.relative_to(folder).as_posix()] = {"bytes": size, "sha256": sha}
    return files


def files_damage(folder: Path, recorded: dict | None, full: bool = False) -> str | None:
    """How a folder differs from the files ``folder_files`` recorded (a file missing, or of
    another size; with ``full``, of another sha256), or None. Nothing recorded passes."""
    for name, entry in (recorded or {}).items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != entry["bytes"]:
            return f"{name} is {size} bytes, recorded {entry['bytes']}"
        if full and digest(path)[1] != entry["sha256"]:
            return f"{name}: its content hash differs from the recorded one"
    return None


INDEX_DIR = ("artifacts", "indexes")


def check_indexes(root: Path) -> list[Problem]:
    """A problem for every saved index folder (``artifacts/indexes/<kind>-<key>/``) whose files
    differ from those its ``manifest.json`` records; the next build sets it aside and rebuilds it."""
    problems = []
    for manifest in sorted(root.joinpath(*INDEX_DIR).glob("*/manifest.json")):
        try:
            recorded = json.loads(manifest.read_text(encoding="utf-8")).get("files")
        except (OSError, ValueError) as exc:
            recorded, why = None, f"manifest.json unreadable: {first_line(exc)}"
        else:
            why = files_damage(manifest.parent, recorded, full=True)
        if why:
            problems.append(Problem("index", _relative(root, manifest.parent), "damaged", why))
    return problems


@dataclass(frozen=True)
class Problem:
    """One file of the warehouse that cannot be trusted.

    ``kind`` is ``damaged`` (the file differs from its manifest entry, or is not readable
    Parquet), ``unrecorded`` (a shard file with no manifest entry), ``missing`` (an entry whose
    file is gone) or ``quarantined`` (a file a repair set aside and has not rebuilt yet). ``path`` is relative to the warehouse root. ``readable`` says whether the
    file's Parquet footer reads (an unrecorded file that reads may be one written before
    manifests existed: ``adopt`` records it).
    """

    table: str
    path: str
    kind: str
    detail: str
    readable: bool = False

    def __str__(self) -> str:
        return f"{self.kind}: {self.path} ({self.table}): {self.detail}"


def parquet_rows(path: Path) -> tuple[int | None, str | None]:
    """(row count from the footer, None), or (None, why the file cannot be read as Parquet)."""
    try:
        return pq.read_metadata(path).num_rows, None
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is unusable
        return None, f"not readable as Parquet: {first_line(exc)}"


def check_file(root: Path, table: str, path: Path) -> Problem | None:
    """The problem with one shard file, or None when it matches its entry.

    A file whose size and sha256 equal its entry's holds exactly the bytes that were written and
    read back, so it is not parsed again; any other file's footer is read for its row count.
    """
    relative = _relative(root, path)
    entry = read_entry(root, path)
    if entry is not None:
        differs = mismatch(root, path, entry)
        if differs is None:
            return None
    rows, unreadable = parquet_rows(path)
    if entry is None:
        return Problem(
            table,
            relative,
            "unrecorded",
            f"no manifest entry; {unreadable or f'{rows} rows'}",
            readable=unreadable is None,
        )
    found = unreadable or (f"{rows} rows, recorded {entry['rows']}" if rows != entry["rows"] else None)
    return Problem(table, relative, "damaged", "; ".join(p for p in (differs, found) if p), readable=unreadable is None)


def check(warehouse: Warehouse, workers: int | None = None) -> list[Problem]:
    """Every damaged, unrecorded or missing shard file of every table, saved index, trainer file
    and dataset card (``warehouse.exported``), in path order.

    Files are hashed on ``workers`` threads (default: one per core); sha256 releases the GIL on
    large buffers, so a check is bound by the disk or by the cores' hashing speed.
    """
    root = warehouse.root
    jobs = [(table, path) for table in TABLES for path in warehouse.files(table)]
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        problems = [p for p in pool.map(lambda job: check_file(root, *job), jobs) if p]
    for table in TABLES:
        problems += _lost(root, table)
    from ragfactory.warehouse.exported import check_exported  # it builds on this module

    problems += check_indexes(root) + check_exported(root)
    return sorted(problems, key=lambda p: p.path)


def gone(root: Path, table: str, path: Path) -> Problem:
    """The problem of a recorded shard whose file is not there: set aside by a repair that has
    not finished (``quarantined``), or lost (``missing``)."""
    entry = read_entry(root, path) or {}
    if entry.get("quarantined"):
        held = "its rows" if entry.get("rows") is None else f"its {entry['rows']} rows"
        return Problem(
            table, _relative(root, path), "quarantined", f"{held} set aside in {entry['quarantined']}, not rebuilt yet"
        )
    return Problem(table, _relative(root, path), "missing", "the manifest records it but the file is gone")


def adopt(warehouse: Warehouse, problems: list[Problem]) -> list[Problem]:
    """Record a manifest entry for each unrecorded file that reads as Parquet (files written
    before manifests existed, which the owner vouches for); returns the problems adopted."""
    adopted = []
    for problem in problems:
        if problem.kind == "unrecorded" and problem.readable:
            path = warehouse.root / problem.path
            rows = pq.read_metadata(path).num_rows if path.suffix == ".parquet" else None  # a card: no rows
            sidecar = manifest_path(warehouse.root, path)
            sidecar.parent.mkdir(parents=True, exist_ok=True)
            _write_json(sidecar, entry_for(warehouse.root, path, rows))
            adopted.append(problem)
    return adopted
