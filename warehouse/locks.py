"""Advisory file locks under the warehouse root, for read-modify-write of shared shards.

Most shards have one writer: a run's partition belongs to that run. The ingested inputs
(``questions``, ``passages``, ``rejects``, ``ingests``) do not: every build that names a dataset
writes its shard, and two builds into one root may do so at the same moment. ``Warehouse.merge``
reads the shard, adds its rows and writes it back; without a lock, the second writer's union
would not contain the first's rows and they would be lost. The lock covers exactly that
read-union-write of one shard file.

Why ``fcntl.flock`` on ``<root>/_locks/<table>-<partition>-<shard>.lock``: it is released by the
kernel when the holder dies (kill -9 leaves no stale lock to clear by hand), it needs no
server, and every process on the machine sharing the root sees it. It is advisory and local:
a root shared over NFS or an object store needs a table format with its own commit protocol
instead (``warehouse/integrity.py`` weighs them). The lock
files stay behind (empty, a few bytes of inode each): deleting one while another process waits
on it would let a third take a different lock on the same name. ``_locks`` starts with an
underscore, so pyarrow's discovery and ``ragfactory check`` skip it like ``_manifest``.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_DIR = "_locks"


def lock_path(root: Path, *parts: str) -> Path:
    """The lock file of one shard: ``<root>/_locks/<part>-<part>….lock`` (parts are safe names)."""
    return Path(root) / LOCK_DIR / ("-".join(parts) + ".lock")


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if absent) for the ``with`` block;
    waits for the current holder, which keeps it for one shard's read-union-write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
