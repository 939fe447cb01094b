"""Write a file or a folder under a temporary name beside it, then rename it into place.

Every file the project commits (warehouse shards and their manifest entries, the catalog, verl
parquet, embedding-cache files) and every folder it builds (saved indexes, the converted embedded
model) is written this way, so a reader or a later run sees the old content or the new one, never
a half-written one, and a failure while writing leaves the old content and no temporary behind.

The temporary is ``.<name>.<random hex>.tmp`` in the target's own folder: hidden, ending in
``.tmp`` (so ``*.parquet`` globs and table views never pick it up), and on the target's file
system, which is what makes the rename atomic.

Blind spots, by design:

- A rename is atomic only within one file system on a local or POSIX-like mount. An object
  store (S3, GCS) has no rename: a "rename" there is a copy then a delete, which readers can see
  half done. Sharing a root across machines through one needs a table format, not this module.
- Nothing is fsynced. A crashed or killed process never leaves a torn target, but a power loss
  or kernel crash shortly after a rename may, on some file systems, leave the new name with
  empty or partial content. For warehouse shards and saved indexes, their manifests
  (``warehouse.integrity``) catch such a file afterwards; other targets are not checked.
- The target's folder must exist; these helpers create no parents.
- Only a file rename replaces its target atomically. A folder cannot be renamed over a
  non-empty folder, so ``atomic_dir`` either removes the old folder first (``replace=True``:
  there is a moment with no folder at all, so the caller holds a lock against other writers)
  or lets the first writer win (``finished``).

This module imports nothing of the project, so the warehouse and every part of ``tasks/`` share it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_dir", "atomic_path", "atomic_write_bytes", "atomic_write_text"]


def _sibling(target: str | os.PathLike) -> Path:
    """A fresh temporary name beside ``target``: ``.<name>.<32 hex>.tmp`` in the same folder."""
    target = Path(target)
    return target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")


@contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """A temporary file path beside ``target`` for the block to write; when the block ends
    without an error, it is renamed over ``target`` (replacing any file there, atomically).

    If the block raises, or the rename fails, the temporary is removed and the error goes on;
    ``target`` is left as it was. A block that writes nothing to the path fails at the rename
    (FileNotFoundError naming the temporary).
    """
    target = Path(target)
    tmp = _sibling(target)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(target: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` as the whole content of ``target``, atomically (``atomic_path``)."""
    target = Path(target)
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)
    return target


def atomic_write_text(target: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` as the whole content of ``target``, atomically (``atomic_path``)."""
    target = Path(target)
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding=encoding)
    return target


@contextmanager
def atomic_dir(
    target: str | os.PathLike,
    *,
    replace: bool = False,
    finished: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """A temporary folder path beside ``target`` for the block to fill; when the block ends
    without an error, it is renamed to ``target``.

    The path does not exist yet: the block creates the folder (``mkdir``, or a writer such as
    ``save_pretrained`` that makes its own). If the block raises, or the rename fails, the
    temporary folder is removed and the error goes on; ``target`` is left as it was.

    What happens to a folder already at ``target``:

    - by default, the rename fails on a non-empty one (OSError) and the error goes on (an empty
      one is replaced, as POSIX ``rename`` does);
    - ``replace=True``: it is removed first, then ours is renamed in. Not atomic: between the two
      there is no folder at ``target``, so callers hold a lock against other writers;
    - ``finished``: when the rename fails and ``finished(target)`` says the folder there is a
      complete one (another writer of the same content won the race), ours is discarded and
      theirs kept; otherwise the error goes on.
    """
    if replace and finished is not None:
        raise ValueError("atomic_dir: give replace or finished, not both")
    target = Path(target)
    tmp = _sibling(target)
    try:
        yield tmp
        if replace and target.exists():
            shutil.rmtree(target)
        try:
            os.rename(tmp, target)
        except OSError:
            if finished is None or not finished(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
