"""Every export folder of a warehouse, loaded the way the trainers load it (``docs/clients.md``).

OpenRLHF and TRL users hand ``datasets.load_dataset`` a warehouse folder (``<table>/run_id=<run>``)
and verl its parquet file; LLaMA-Factory reads the files its ``dataset_info.json`` names. One file
``datasets`` refuses (an empty shard written as one row group of 0 rows) fails the whole folder,
so ``unloadable`` loads each of them and reports the ones that fail, with the first line of why.
A folder whose files hold no rows at all is not loadable by any of them (``datasets`` answers
"corresponds to no data") and is reported as empty rather than tried.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from ragfactory.progress import quiet_libraries
from ragfactory.tasks.export.registry import EXPORTS
from ragfactory.warehouse.exported import CARD
from ragfactory.warehouse.store import Warehouse

# the artifacts a trainer reads file by file (verl's data.train_files; LLaMA-Factory's dataset_info)
TRAINER_ARTIFACTS = ("verl", "llamafactory")


@dataclass(frozen=True)
class Unloadable:
    """One export folder or file ``datasets.load_dataset`` does not load, and why."""

    path: Path
    detail: str
    empty: bool = False  # holds no rows: nothing to train on, rather than broken

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"


def export_targets(wh: Warehouse) -> list[Path]:
    """What a trainer loads: each run's folder of every exported table, then each trainer file."""
    targets = []
    for table in EXPORTS.tables():
        folder = wh.root / table
        targets += sorted(p for p in folder.glob("run_id=*") if p.is_dir()) if folder.exists() else []
    for client in TRAINER_ARTIFACTS:
        targets += sorted((wh.root / "artifacts" / client).glob("*/*.parquet"))
    return targets


def card_folders(wh: Warehouse) -> list[Path]:
    """Each trainer folder with a dataset card: ``datasets.load_dataset(folder)`` reads the card's
    default config (an exported table's folder is an export target already)."""
    return [
        card.parent
        for client in TRAINER_ARTIFACTS
        for card in sorted((wh.root / "artifacts" / client).glob(f"*/{CARD}"))
    ]


def _why(exc: BaseException) -> str:
    """The first line of the innermost cause (``datasets`` wraps the reader's error in its own)."""
    while exc.__cause__ or exc.__context__:
        exc = exc.__cause__ or exc.__context__
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def unloadable(wh: Warehouse) -> tuple[list[Unloadable], int]:
    """The export targets ``datasets.load_dataset`` refuses (empty ones reported, not loaded), and
    how many loaded."""
    import datasets  # the trainers' loader; imported here because only this check needs it

    with quiet_libraries():  # a check prints its findings, not a bar or a log line per folder
        return _load_all(wh, datasets.load_dataset)


def _load_all(wh: Warehouse, load_dataset) -> tuple[list[Unloadable], int]:
    problems, loaded = [], 0
    with tempfile.TemporaryDirectory(prefix="ragfactory-load-") as cache:
        for i, target in enumerate(export_targets(wh) + card_folders(wh)):  # a cache each: folders of one base name
            problem = _load(target, load_dataset, f"{cache}/{i}")
            problems += [problem] if problem else []
            loaded += problem is None
    return problems, loaded


def _load(target: Path, load_dataset, cache: str) -> Unloadable | None:
    """Why ``target`` does not load as a trainer loads it, or None: a Parquet file whose footer
    does not read is named itself; a folder is loaded as ``datasets.load_dataset(folder)``, so
    its dataset card's YAML header (its configs) is read as a user's load reads it."""
    rows = 0
    for path in [target] if target.is_file() else sorted(target.glob("*.parquet")):
        try:
            rows += pq.read_metadata(path).num_rows
        except Exception as exc:  # noqa: BLE001 - any reader failure means the file is unusable
            return Unloadable(path, f"not readable as Parquet: {_why(exc)}")
    if rows == 0:
        return Unloadable(target, "no rows: nothing for a trainer to load", empty=True)
    try:
        if target.is_file():
            load_dataset("parquet", data_files=str(target), split="train", cache_dir=cache)
        else:
            load_dataset(str(target), split="train", cache_dir=cache)
    except Exception as exc:  # noqa: BLE001 - whatever stops the trainers' loader is the finding
        return Unloadable(target, _why(exc))
    return None
