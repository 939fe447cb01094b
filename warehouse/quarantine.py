"""Setting damaged warehouse files aside without hiding what they held.

``ragfactory check --repair`` moves each file it cannot trust to ``<root>/_quarantine/<stamp>/``
(same relative path) before running again the runs that wrote it. The file's manifest entry
stays where it was, marked ``quarantined`` with where the bytes went, until the rebuilt file is
committed (``warehouse.integrity.commit_shard`` replaces the entry). So a repair that dies half
way (a Prefect server that never starts, a machine that goes down) leaves ``check`` failing and
naming every shard still set aside, instead of a warehouse that checks clean with rows gone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ragfactory.atomic import atomic_write_text
from ragfactory.warehouse.integrity import MANIFEST_VERSION, Problem, manifest_path, read_entry

if TYPE_CHECKING:
    from ragfactory.warehouse.store import Warehouse

QUARANTINE_DIR = "_quarantine"
# Kinds whose rows a repair must bring back: a check that finds one fails until it has.
LOST = ("quarantined", "missing")


def quarantine(warehouse: Warehouse, problems: list[Problem], stamp: str) -> list[Problem]:
    """Move every damaged file, and every unrecorded one that does not read as Parquet, to
    ``<root>/_quarantine/<stamp>/`` with a copy of its manifest entry, and mark the entry left in
    place ``quarantined``. Returns what was moved. A missing file has nothing to move: its entry
    stays, and ``check`` names it until it is rebuilt.

    Nothing is deleted: the person on call can still look at the bytes.
    """
    root = warehouse.root
    moved = []
    for problem in problems:
        if (problem.kind == "unrecorded" and problem.readable) or problem.kind in LOST:
            continue
        path = root / problem.path
        target = root / QUARANTINE_DIR / stamp / problem.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if problem.table != "index":
            _mark(root, path, root / QUARANTINE_DIR / stamp)
        os.replace(path, target)
        moved.append(problem)
    return moved


def _mark(root: Path, path: Path, folder: Path) -> None:
    """Keep a copy of ``path``'s entry in the quarantine ``folder``, and mark the entry in place
    quarantined (an unrecorded file gets an entry that says only that)."""
    entry = read_entry(root, path)
    target = folder / path.relative_to(root)
    if entry is not None:
        copy = folder / manifest_path(root, path).relative_to(root)
        copy.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(copy, json.dumps(entry, sort_keys=True) + "\n")
    marked = entry or {
        "version": MANIFEST_VERSION,
        "path": path.relative_to(root).as_posix(),
        "rows": None,
        "bytes": None,
        "sha256": None,
    }
    marked = marked | {"quarantined": target.relative_to(root).as_posix()}
    sidecar = manifest_path(root, path)
    sidecar.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(sidecar, json.dumps(marked, sort_keys=True) + "\n")


def lost(problems: list[Problem]) -> list[Problem]:
    """The problems whose rows are out of the warehouse until a repair brings them back."""
    return [p for p in problems if p.kind in LOST]
