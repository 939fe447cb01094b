"""A read-only file system over the warehouse root, the only one a confined connection has.

A confined DuckDB connection (``warehouse.confined``) runs with its local file system disabled,
so every file it touches goes through this one: paths are ``warehouse://<path under the root>``
(``warehouse://questions/dataset=hotpotqa/dev.parquet``). It opens files for reading only and has
no way to create, change, move or delete anything, and it resolves every path (symlinks and
``..`` included) and refuses one that lands outside the root. That makes "nothing a query does
writes a file" a property of the connection, not only of the statement checks in front of it.
"""

from __future__ import annotations

import os
import re
import threading
from datetime import UTC, datetime
from pathlib import Path

from fsspec.spec import AbstractFileSystem
from fsspec.utils import glob_translate

PROTOCOL = "warehouse"
PREFIX = f"{PROTOCOL}://"


class ReadOnlyError(PermissionError):
    """Something asked the warehouse file system to write, or to reach outside the root."""


class PartialTable(FileNotFoundError):
    """A path or pattern that would match a recorded shard whose file is gone: what it reads is
    not the whole table."""


class WarehouseFileSystem(AbstractFileSystem):
    """``warehouse://`` paths, read-only, confined to one root directory."""

    protocol = (PROTOCOL,)
    root_marker = ""
    cachable = False  # one instance per connection and root; fsspec must not hand back another

    def __init__(self, root: str | os.PathLike):
        super().__init__()
        self.root = os.path.realpath(root)

    @classmethod
    def _strip_protocol(cls, path) -> str:
        path = str(path)
        if path.startswith(PREFIX):
            path = path[len(PREFIX) :]
        return path.strip("/")

    def local_path(self, path) -> str:
        """The file a warehouse path names, after symlinks; refused if it is not under the root."""
        relative = self._strip_protocol(path)
        local = os.path.realpath(os.path.join(self.root, relative))
        if local != self.root and not local.startswith(self.root + os.sep):
            raise ReadOnlyError(f"{PREFIX}{relative} resolves outside the warehouse root {self.root}")
        return local

    def check_pattern(self, path) -> None:
        """Refuse a path or glob pattern whose literal part (up to the first wildcard) leaves the root.

        Past the first wildcard, matching only walks the root, so ``..`` there matches nothing.
        """
        parts = self._strip_protocol(path).split("/")
        literal = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
        self.local_path("/".join(parts[:literal]))

    def check_whole(self, path) -> None:
        """Refuse a path or pattern that would match a recorded shard whose file is gone (deleted
        by hand: ``missing``; set aside by a repair not finished: ``quarantined``), naming it as
        the table views do: what the pattern finds is not the whole table."""
        from ragfactory.schemas.tables import TABLES
        from ragfactory.warehouse.integrity import damage_line, lost_under

        pattern = self._strip_protocol(path)
        matches = re.compile(glob_translate(pattern)).match
        first = re.compile(glob_translate(pattern.split("/", 1)[0])).match
        for table in (t for t in TABLES if first(t)):
            lost = [shard for shard in lost_under(Path(self.root), table) if matches(shard[1])]
            if lost:
                raise PartialTable(damage_line(Path(self.root), table, lost))

    def _relative(self, local: str) -> str:
        relative = os.path.relpath(local, self.root)
        return "" if relative == "." else relative.replace(os.sep, "/")

    def info(self, path, **kwargs) -> dict:
        local = self.local_path(path)
        try:
            stat = os.stat(local)
        except FileNotFoundError:
            raise FileNotFoundError(path) from None
        kind = "directory" if os.path.isdir(local) else "file"
        return {"name": self._relative(local), "size": stat.st_size, "type": kind, "mtime": stat.st_mtime}

    def ls(self, path, detail=True, **kwargs):
        folder = self.local_path(path)
        if not os.path.isdir(folder):
            entries = [self.info(path)]
        else:
            entries = []
            for name in sorted(os.listdir(folder)):
                try:
                    entries.append(self.info(self._relative(os.path.join(folder, name))))
                except (ReadOnlyError, FileNotFoundError):
                    continue  # a link out of the root, or a file gone since the listing: not shown
        return entries if detail else [entry["name"] for entry in entries]

    def glob(self, path, **kwargs):
        # fsspec's glob answers "no match" for a path it cannot stat; a path that leaves the root
        # is refused by name instead. Files only, as DuckDB's own glob answers: a reader handed
        # a folder would fail on it.
        self.check_pattern(path)
        kwargs.pop("detail", None)
        found = super().glob(path, detail=True, **kwargs)
        return [name for name, info in found.items() if info["type"] == "file"]

    def modified(self, path) -> datetime:
        return datetime.fromtimestamp(self.info(path)["mtime"], tz=UTC)

    def _open(self, path, mode="rb", **kwargs):
        if mode != "rb":
            raise ReadOnlyError(
                f"{PREFIX}{self._strip_protocol(path)}: the warehouse is read-only here "
                f"(asked to open it with mode {mode!r})"
            )
        return PositionalFile(self.local_path(path))

    def _refuse(self, path, *args, **kwargs):
        raise ReadOnlyError(f"{PREFIX}{self._strip_protocol(path)}: the warehouse is read-only here")

    # Every call that would change the tree: fsspec's defaults would silently succeed (mkdir)
    # or fall back to copy-and-delete (mv); here each one is refused, naming the path.
    mkdir = makedirs = rmdir = rm = rm_file = _rm = touch = _refuse
    mv = cp_file = copy = put = put_file = pipe = pipe_file = _refuse


class PositionalFile:
    """A read-only file whose position belongs to the thread that moved it.

    DuckDB reads a Python file system's handle as ``seek(offset)`` then ``read(n)``, from several
    threads at once (its scan and I/O threads, whatever its ``threads`` setting): with one shared
    position, a thread reads at another's offset and the Parquet reader sees torn pages ("Snappy
    decompression failure", "Invalid data"). Here each thread's seek moves only its own position
    and every read is a positional ``pread``, so a seek-then-read pair is whole whatever the
    other threads do.
    """

    mode = "rb"

    def __init__(self, path: str):
        self.name = path
        self._fd = os.open(path, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size
        self._local = threading.local()

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def _position(self) -> int:
        return getattr(self._local, "position", 0)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position(), os.SEEK_END: self._size}[whence]
        self._local.position = max(0, base + offset)
        return self._local.position

    def tell(self) -> int:
        return self._position()

    def read(self, size: int = -1) -> bytes:
        if self._fd < 0:
            raise ValueError(f"read of closed file {self.name}")
        position = self._position()
        if size is None or size < 0:
            size = max(0, self._size - position)
        chunks = []
        while size > 0:
            chunk = os.pread(self._fd, size, position)
            if not chunk:
                break  # end of file
            chunks.append(chunk)
            position += len(chunk)
            size -= len(chunk)
        self._local.position = position
        return b"".join(chunks)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> PositionalFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def warehouse_url(root: Path, local: Path) -> str:
    """The ``warehouse://`` form of a local path under the root (a file or a glob pattern)."""
    return PREFIX + local.relative_to(root).as_posix()
