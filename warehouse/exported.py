"""The files a trainer reads beside the shards: verl's and LLaMA-Factory's files and the dataset
cards, recorded in the manifest as shards are, so ``check`` vouches for them too.

A trainer reads ``artifacts/verl/<run>/<strategy>.parquet`` (verl's ``data.train_files``),
``artifacts/llamafactory/<run>/`` (its ``dataset_info.json`` and the files it names) and each
export folder's ``README.md`` (``datasets.load_dataset(folder)`` reads its YAML header) as they
are: a damaged one fails a training, or trains on other rows, without the warehouse's tables
saying anything. Their writers commit them with ``commit_shard`` (``tasks/export/``), so each has
a sidecar under ``_manifest/`` (rows are null for a file that is not a table); here every such
file is compared with its entry, as ``check_file`` compares a shard.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ragfactory.schemas.tables import TABLES
from ragfactory.warehouse.integrity import (
    MANIFEST_DIR,
    MANIFEST_SUFFIX,
    Problem,
    gone,
    mismatch,
    parquet_rows,
    read_entry,
    shard_of_manifest,
)

TRAINER_FOLDERS = (("artifacts", "verl"), ("artifacts", "llamafactory"))
CARD = "README.md"
KIND = "export"  # the ``table`` of their problems


def exported_files(root: Path) -> Iterator[Path]:
    """Every trainer file (dot files, such as a folder's lock, left out) and every dataset card
    under the table folders."""
    for parts in TRAINER_FOLDERS:
        yield from sorted(p for p in root.joinpath(*parts).glob("*/*") if p.is_file() and not p.name.startswith("."))
    for table in TABLES:
        yield from sorted(root.joinpath(table).rglob(CARD))


def _sidecars(root: Path) -> Iterator[Path]:
    for parts in TRAINER_FOLDERS:
        yield from sorted(root.joinpath(MANIFEST_DIR, *parts).glob(f"*/*{MANIFEST_SUFFIX}"))
    for table in TABLES:
        yield from sorted(root.joinpath(MANIFEST_DIR, table).rglob(f"{CARD}{MANIFEST_SUFFIX}"))


def check_exported(root: Path) -> list[Problem]:
    """A problem for every trainer file or card that differs from its entry (``damaged``), has
    none (``unrecorded``: written before these files were recorded, which ``--adopt`` records, or
    by hand) or whose entry has no file (``missing``, or ``quarantined`` by a repair)."""
    problems = []
    for path in exported_files(root):
        relative, entry = path.relative_to(root).as_posix(), read_entry(root, path)
        unreadable = parquet_rows(path)[1] if path.suffix == ".parquet" else None
        if entry is None:
            detail = f"no manifest entry; {unreadable or 'readable'}"
            problems.append(Problem(KIND, relative, "unrecorded", detail, readable=unreadable is None))
        elif differs := mismatch(root, path, entry):
            problems.append(Problem(KIND, relative, "damaged", "; ".join(p for p in (differs, unreadable) if p)))
    for sidecar in _sidecars(root):
        path = shard_of_manifest(root, sidecar)
        if not path.exists():
            problems.append(gone(root, KIND, path))
    return problems
