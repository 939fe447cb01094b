"""Passage ids that two sources of one index give different passages.

An index holds each passage id once: ``WarehousePassages`` keeps an id's first row in path order,
that is the row of the source whose name sorts first. The ids it meets more than once while it
streams the passages (``repeats``) are read again here, and an id whose rows differ in title or
text is a ``Conflict``: the later source's passage can never be retrieved. A repeat with the same
title and text (a paragraph two datasets share) is no conflict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ragfactory.tasks.data.corpus import SeenIds
from ragfactory.tasks.retrieval.index_store import PASSAGE_COLUMNS
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse


@dataclass(frozen=True)
class Conflict:
    """An id whose passage in ``dropped`` differs from the one the index keeps, from ``kept``."""

    passage_id: str
    kept: str  # the source whose passage the index holds
    dropped: str  # the source whose passage it does not hold

    def as_json(self) -> dict:
        return asdict(self)


def first_seen(seen: SeenIds, repeats: set[str], ids: Iterable[str]) -> list[bool]:
    """Whether each id is met for the first time; the others join ``repeats``."""
    keep = []
    for pid in ids:
        new = seen.add(pid)
        keep.append(new)
        if not new:
            repeats.add(pid)
    return keep


def source_of(path: Path) -> str:
    """The source of a ``passages`` file, from its ``source=<name>`` folder."""
    return path.parent.name.split("=", 1)[1]


def find_conflicts(files: list[Path], repeats: set[str]) -> list[Conflict]:
    """The conflicts among the rows of ``repeats`` in ``files`` (read in this order), one per id
    and source whose passage differs from the id's first row."""
    if not repeats:
        return []
    wanted = pa.array(sorted(repeats), pa.string())
    first: dict[str, tuple[str, str, str]] = {}
    found: dict[tuple[str, str], Conflict] = {}
    for path in files:
        ids = pq.read_table(path, columns=["passage_id"]).column("passage_id")
        mask = pc.is_in(ids, value_set=wanted)
        if not pc.any(mask).as_py():
            continue
        rows = pq.read_table(path, columns=list(PASSAGE_COLUMNS)).filter(mask).to_pylist()
        for row in rows:
            pid, source = row["passage_id"], source_of(path)
            kept = first.setdefault(pid, (source, row["title"] or "", row["text"]))
            if kept[1:] != (row["title"] or "", row["text"]):
                found.setdefault((pid, source), Conflict(pid, kept[0], source))
    return list(found.values())


def source_files(wh: Warehouse, sources: list[str]) -> dict[str, tuple[str, str]]:
    """(file, kind) each source was last ingested from (``ingests.source_file``, ``ingests.kind``)."""
    sql = "select dataset, source_file, kind from ingests where list_contains($sources, dataset) order by created_at"
    rows = query(wh, sql, {"sources": sources}).to_pylist()
    return {r["dataset"]: (r["source_file"], r["kind"]) for r in rows}


def conflicts_warning(conflicts: list[Conflict], files: dict[str, str]) -> str:
    """One line: how many ids two files give different passages, the first with both files."""
    first = conflicts[0]
    return (
        f"{len(conflicts)} passage id(s) name different passages in two corpus files, e.g. "
        f"{first.passage_id!r} in {files.get(first.kept, first.kept)} and {files.get(first.dropped, first.dropped)}: "
        "the index holds the first file's passage only"
    )
