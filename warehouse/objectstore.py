"""A warehouse whose home is an object store (``s3://bucket/prefix``), worked on through a local mirror.

The object store holds the warehouse: every shard the factory commits is uploaded as one whole
object, then its manifest entry (``warehouse.integrity``) as another, under the same relative
keys as on disk (``<uri>/nodes/run_id=…/<shard>.parquet``, ``<uri>/_manifest/nodes/…json``). An
object appears only when its upload completes (a single PUT, or a multipart upload's completion),
so a reader never sees a torn shard; the order (old entry deleted, shard, then entry) keeps the
local rule: an entry only ever describes an object that is there with exactly those bytes, and a
shard without an entry is unrecorded and not trusted.

Every machine works on a local mirror of it (``$RAGFACTORY_HOME/mirrors/<scheme>/<bucket>/<prefix>``):
the same folders, locks, run locks, artifacts and catalog as a local warehouse, so every stage
reads and writes local files as it always has (DuckDB and pyarrow at local-disk speed, flock for
the shard locks of one machine). ``pull`` brings the mirror up to the store: each entry whose
object the mirror lacks, or holds with other bytes, is downloaded to a temporary file, checked
against its entry (size and sha256) and renamed into place, so an object changed in the store
after it was written is refused by name, never mirrored. A build pulls before it plans its
shards (a rerun on any machine skips what any machine committed), and so does every command
that opens the warehouse.

Why a mirror rather than reading every stage's Parquet straight from the store: the stages read
whole tables many times over (valuation, export, the catalog, integrity checks), and one
download per changed shard beats one per read; the locks of ``merge`` need a file system with
flock, which an object store is not. What stays machine-local: the catalog file (its views name
local paths, for the duckdb CLI), logs and artifacts (retrieval indexes, checkpoints) — a
worker on another machine builds its own indexes from the pulled corpus.

Blind spot: ``merge`` (the ingested inputs, shared by many runs) holds a local ``flock``, so
two machines ingesting the same dataset into one store at the same moment can each upload
their own union and the later PUT wins; every other shard has exactly one writer (its run's
shard task), so last-writer-wins is the right rule for it. A conditional PUT (``If-Match`` on
the entry's ETag) would close the gap where the store supports it.

Credentials and the endpoint come from the environment as for any AWS client
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL`` for an S3-compatible
server such as MinIO or moto), through fsspec (``s3fs`` for ``s3://``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ragfactory.atomic import atomic_path, atomic_write_text
from ragfactory.warehouse.integrity import MANIFEST_DIR, MANIFEST_SUFFIX, digest, manifest_path

MIRRORS = "mirrors"
_PARALLEL = 8  # object requests in flight during a pull: latency-bound, not CPU-bound


class ObjectStoreError(RuntimeError):
    """The object store refused, or holds an object that is not what its entry records."""


def is_remote(root: str | os.PathLike | None) -> bool:
    """Whether ``root`` names an object store (``scheme://…``, other than ``file://``)."""
    return isinstance(root, str) and "://" in root and not root.startswith("file://")


def mirror_of(uri: str, home: Path) -> Path:
    """The local mirror of the store at ``uri`` under the factory's home folder ``home``."""
    scheme, _, rest = uri.partition("://")
    parts = [part for part in rest.split("/") if part]
    if not parts or any(part in {".", ".."} for part in parts):
        raise ValueError(f"warehouse root {uri!r}: name a bucket (and a prefix), e.g. s3://bucket/warehouse")
    return home.joinpath(MIRRORS, scheme, *parts)


@dataclass(frozen=True)
class Pulled:
    """What a pull did: objects downloaded and objects the mirror already held."""

    downloaded: int
    current: int
    tables: tuple[str, ...] | None = None  # the tables pulled; None: all of them

    def __str__(self) -> str:
        of = f" of {', '.join(self.tables) or 'no table'}" if self.tables is not None else ""
        return f"{self.downloaded} shard(s){of} downloaded, {self.current} current"


class ObjectStore:
    """The object store at ``uri`` and the local mirror ``root`` that works on it."""

    def __init__(self, uri: str, root: Path):
        import fsspec

        self.uri = uri.rstrip("/")
        self.root = root
        try:
            # A fresh client per warehouse: fsspec's instance cache would hand back one made for
            # another endpoint (the environment's AWS_ENDPOINT_URL is not in its key).
            self.fs, self.base = fsspec.core.url_to_fs(self.uri, skip_instance_cache=True)
        except ImportError as exc:
            raise ObjectStoreError(f"warehouse root {self.uri}: {exc} (pip install 'ragfactory[s3]')") from exc
        self.base = self.base.rstrip("/")

    def __repr__(self) -> str:
        return f"ObjectStore({self.uri!r})"

    def key(self, path: Path) -> str:
        """The object key of a file under the mirror."""
        return f"{self.base}/{path.relative_to(self.root).as_posix()}"

    def push(self, path: Path) -> None:
        """Upload a committed shard and then its entry; the store's old entry goes first."""
        sidecar = manifest_path(self.root, path)
        try:
            self.fs.rm_file(self.key(sidecar))
        except FileNotFoundError:
            pass
        self._put(path)
        self._put(sidecar)

    def _put(self, path: Path) -> None:
        try:
            self.fs.put_file(str(path), self.key(path))
        except (OSError, ValueError) as exc:
            raise ObjectStoreError(
                f"{self.uri}: cannot upload {path.relative_to(self.root).as_posix()}: {exc}"
            ) from exc

    def pull(self, tables: Iterable[str] | None = None) -> Pulled:
        """Bring the mirror up to the store: every recorded shard the mirror lacks or holds with
        other bytes is downloaded, checked against its entry and renamed into place. ``tables``
        limits that to those tables' shards (a query that reads two tables needs no others)."""
        prefix = f"{self.base}/{MANIFEST_DIR}"
        self.fs.invalidate_cache()  # listings cached earlier miss what other machines wrote since
        try:
            listed = self.fs.find(prefix, detail=True)
        except FileNotFoundError:
            listed = {}
        except OSError as exc:
            raise ObjectStoreError(f"{self.uri}: cannot list the store: {exc}") from exc
        keys = sorted(k for k in listed if k.endswith(MANIFEST_SUFFIX))
        if tables is not None:
            tables = tuple(sorted(set(tables)))
            keys = [k for k in keys if k[len(prefix) + 1 :].split("/", 1)[0] in tables]
        with ThreadPoolExecutor(_PARALLEL) as pool:
            downloaded = sum(pool.map(lambda key: self._pull_one(key, listed[key]), keys))
        return Pulled(downloaded=downloaded, current=len(keys) - downloaded, tables=tables)

    def _entry_text(self, key: str, listing: dict, local: bytes | None) -> str:
        """The text of the entry at ``key``: the mirror's copy (``local``) when it is the store's,
        else fetched."""
        # An entry is a single small PUT, so the store's ETag is the MD5 of its bytes (S3, MinIO,
        # moto): a mirror that holds those bytes needs no GET. Any other ETag (or none) is no
        # answer either way, and the entry is fetched and compared.
        if (
            local is not None
            and str(listing.get("ETag", "")).strip('"') == hashlib.md5(local, usedforsecurity=False).hexdigest()
        ):
            return local.decode("utf-8")
        return self.fs.cat_file(key).decode("utf-8")

    def _pull_one(self, key: str, listing: dict) -> bool:
        """Mirror one entry and its shard; whether the shard was downloaded."""
        sidecar = self.root / key[len(self.base) + 1 :]
        local = sidecar.read_bytes() if sidecar.exists() else None
        text = self._entry_text(key, listing, local)
        entry = json.loads(text)
        path = self.root / entry["path"]
        # The mirror's own files are checked by ``ragfactory check`` as a local warehouse's are:
        # here the entry and the size tell whether it holds this object already.
        if (
            local is not None
            and local.decode("utf-8") == text
            and path.exists()
            and path.stat().st_size == entry["bytes"]
        ):
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as staged:
            try:
                self.fs.get_file(self.key(path), str(staged))
            except FileNotFoundError:
                raise ObjectStoreError(f"{self.uri}: {entry['path']} is recorded but not in the store") from None
            found = digest(staged)
            if found != (entry["bytes"], entry["sha256"]):
                raise ObjectStoreError(
                    f"{self.uri}: {entry['path']} is not the object that was written "
                    f"({found[0]} bytes, sha256 {found[1][:12]}…; recorded {entry['bytes']} bytes, "
                    f"sha256 {entry['sha256'][:12]}…); not mirrored"
                )
            sidecar.unlink(missing_ok=True)
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(sidecar, text)
        return True
