"""Which of a table's Parquet files may hold some of a set of keys, without reading the files.

The call cache (``tasks/llm/cache.py``) and the retrieval ledger (``tasks/retrieval/ledger.py``)
look their keys up in every shard file of every run, once per engine batch or search. A Parquet
scan with an ``isin`` filter prunes nothing on random hex keys (each row group's min and max
span the key space), so such a lookup decompressed every column of every file (prompt token ids,
passage texts): a build's lookups grew with its calls times the files written before them.

``KeyIndex`` reads a file's key column once per version of the file (its size, modification time
and inode: a shard rewritten by ``Warehouse.write`` is a new file) and keeps the keys' Python
hashes, 8 bytes a row. A lookup then scans only the files whose hashes meet the wanted keys',
in the order given, so the rows it reads are those the scan of every file would have found (a
hash collision costs one file's read, never a wrong row). Process-wide (``KEYS``): every shard
of a build shares the reads. Files not asked about for longest are forgotten past ``max_rows``.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds


def _version(path: str) -> tuple[int, int, int]:
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


def key_hashes(keys: Iterable[str | None]) -> np.ndarray:
    """The sorted distinct hashes of the non-null ``keys``."""
    return np.unique(np.fromiter((hash(k) for k in keys if k is not None), dtype=np.int64))


def _meets(hashes: np.ndarray, wanted: np.ndarray) -> bool:
    """Whether two sorted arrays share a value (a binary search per wanted hash)."""
    if not len(hashes):
        return False
    at = np.minimum(np.searchsorted(hashes, wanted), len(hashes) - 1)
    return bool((hashes[at] == wanted).any())


class KeyIndex:
    """Per file and version, the hashes of its key column; bounded by ``max_rows`` hashes."""

    def __init__(self, max_rows: int = 1 << 22):
        self.max_rows = max_rows
        self.reads = 0  # key columns read: once per file version while it stays indexed
        self._files: OrderedDict[tuple[str, str], tuple[tuple[int, int, int], np.ndarray]] = OrderedDict()
        self._rows = 0
        self._lock = threading.Lock()

    def files_holding(
        self, files: Sequence[str], column: str, keys: Iterable[str], schema: pa.Schema | None = None
    ) -> list[str]:
        """The files of ``files`` (in that order) whose ``column`` may hold one of ``keys``;
        ``schema`` is the one the caller scans them with (a column a file lacks reads as nulls)."""
        wanted = key_hashes(keys)
        if not len(wanted):
            return []
        return [path for path in files if _meets(self._hashes(path, column, schema), wanted)]

    def _hashes(self, path: str, column: str, schema: pa.Schema | None) -> np.ndarray:
        version, entry = _version(path), (path, column)
        with self._lock:
            known = self._files.get(entry)
            if known is not None and known[0] == version:
                self._files.move_to_end(entry)
                return known[1]
        table = ds.dataset([path], format="parquet", schema=schema).to_table(columns=[column])
        hashes = key_hashes(table.column(column).to_pylist())
        with self._lock:
            self.reads += 1
            old = self._files.pop(entry, None)
            self._rows += len(hashes) - (len(old[1]) if old is not None else 0)
            self._files[entry] = (version, hashes)
            while self._rows > self.max_rows and len(self._files) > 1:
                _, (_, dropped) = self._files.popitem(last=False)
                self._rows -= len(dropped)
        return hashes


KEYS = KeyIndex()
