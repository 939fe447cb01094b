"""The warehouse: one folder per table, hive partitions, one Parquet file per shard.

docs/architecture.md, "Warehouse".

A shard is written to a temporary name in its partition folder and renamed over the final name,
so a crash never leaves a torn file and rewriting a shard replaces it exactly. Each committed
file gets a manifest entry (rows, bytes, sha256) in a sidecar beside it (``warehouse.integrity``),
so a file changed afterwards is told apart from the one the warehouse wrote. Writers conform
rows to the table's pyarrow schema (``schemas.tables``) and refuse what does not fit with an
error naming the table and column.

Two ways to write a shard: ``write`` replaces it (a run's own shard: a rerun replaces its rows
exactly), ``merge`` adds to it (the ingested inputs, which many runs read: a shard only ever
grows, under a lock so two writers at once both land, ``warehouse.locks``).
"""

from __future__ import annotations

import glob as globmod
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ragfactory.schemas.tables import TABLES, table_spec
from ragfactory.warehouse.integrity import commit_shard, manifest_path
from ragfactory.warehouse.locks import exclusive, lock_path
from ragfactory.warehouse.objectstore import ObjectStore, Pulled, is_remote, mirror_of

ROOT_ENV = "RAGFACTORY_HOME"
DEFAULT_ROOT = Path("~/.ragfactory")
_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def default_root() -> Path:
    """``$RAGFACTORY_HOME`` if set, else ``~/.ragfactory``."""
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT).expanduser()


def safe_name(value: str) -> str:
    """A partition value or shard name usable as one path component."""
    cleaned = _SAFE.sub("_", str(value))
    if not cleaned or cleaned in {".", ".."}:
        raise ValueError(f"unusable partition or shard name {value!r}")
    return cleaned


def folder_name_problem(name: str, column: str, what: str) -> str | None:
    """Why ``name`` would not come back as it is from its ``<column>=<name>`` partition folder, or
    None when it would: the folder keeps letters, digits, '_', '.' and '-' and replaces any other
    character with '_' (``safe_name``), so a table would read back a name nobody gave. ``what``
    names the value in the message ("a dataset name", "a run id")."""
    read_back = _SAFE.sub("_", name)
    if read_back == name and name not in {"", ".", ".."}:
        return None
    folder = f"cannot be a {column}=<name> folder"
    if read_back != name:
        folder = f"would be read back as {read_back!r} from its {column}=<name> folder"
    return f"{name!r} {folder}; {what} keeps to letters, digits, '_', '.' and '-' (not '.' or '..')"


def write_parquet(rows: pa.Table, where: str | os.PathLike, **options) -> None:
    """Write ``rows`` as one Parquet file; a table with no rows becomes a file with no row group.

    pyarrow's ``write_table`` gives an empty table one row group of 0 rows, which ``datasets``'
    Parquet reader refuses ("BatchSize must be greater than 0") and with it the whole folder a
    trainer loads; a file with no row group reads as 0 rows in datasets, pyarrow, polars and DuckDB.
    """
    if rows.num_rows:
        pq.write_table(rows, where, **options)
    else:
        pq.ParquetWriter(where, rows.schema, **options).close()


class SchemaMismatch(ValueError):
    """Rows that do not fit a table's schema."""


def conform(table_name: str, data: pa.Table | Iterable[Mapping]) -> pa.Table:
    """Cast rows to the table's schema: missing columns become nulls, extra columns are refused."""
    spec = table_spec(table_name)
    if not isinstance(data, pa.Table):
        data = list(data)
        extra = sorted({key for row in data for key in row} - set(spec.schema.names))
        if extra:
            raise SchemaMismatch(f"{table_name}: unknown column(s) {extra}")
        try:
            return pa.Table.from_pylist(data, schema=spec.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise SchemaMismatch(f"{table_name}: rows do not fit the schema: {exc}") from exc
    extra = sorted(set(data.column_names) - set(spec.schema.names))
    if extra:
        raise SchemaMismatch(f"{table_name}: unknown column(s) {extra}")
    columns = []
    for field in spec.schema:
        if field.name not in data.column_names:
            columns.append(pa.nulls(data.num_rows, field.type))
            continue
        try:
            columns.append(data.column(field.name).cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatch(
                f"{table_name}.{field.name}: cannot cast {data.schema.field(field.name).type} to {field.type}: {exc}"
            ) from exc
    return pa.Table.from_arrays(columns, schema=spec.schema)


class Warehouse:
    """Parquet tables under one root directory, plus the DuckDB catalog file that views them.

    The root may be an object store's URI (``s3://bucket/prefix``): ``root`` is then its local
    mirror, every committed shard is uploaded as it is written, and ``pull`` brings the mirror
    up to the store (``warehouse.objectstore``). ``location`` is what to hand another process
    (a task, a worker) so that it opens the same warehouse.
    """

    def __init__(self, root: str | os.PathLike | None = None):
        self.store: ObjectStore | None = None
        if is_remote(root):
            mirror = mirror_of(str(root).rstrip("/"), default_root().resolve())
            self.store = ObjectStore(str(root), mirror)
            self.root = mirror
        else:
            self.root = Path(root).expanduser().resolve() if root else default_root().resolve()

    def __repr__(self) -> str:
        return f"Warehouse({self.location!r})"

    @property
    def location(self) -> str:
        """The root as given to open this warehouse again: the store's URI, or the folder."""
        return self.store.uri if self.store else str(self.root)

    def pull(self, tables: Iterable[str] | None = None) -> Pulled | None:
        """Bring a store's mirror up to the store, or only ``tables`` of it (None for a local
        warehouse)."""
        return self.store.pull(tables) if self.store else None

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog.duckdb"

    def table_dir(self, table: str) -> Path:
        table_spec(table)
        return self.root / table

    def artifacts_dir(self, *parts: str) -> Path:
        """A folder under the root for non-tabular outputs (indexes, model checkpoints)."""
        path = self.root.joinpath("artifacts", *parts)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def partition_dir(self, table: str, partition: Mapping[str, str]) -> Path:
        """The folder of one partition of a table, ``<table>/<col>=<value>/…`` under the root in
        the table's partition order, each value made path-safe (``safe_name``): where ``write``
        puts that partition's shards. Every partition column needs a value."""
        spec = table_spec(table)
        missing = [col for col in spec.partition_by if col not in partition]
        if missing:
            raise ValueError(f"{table}: partition value(s) missing for {missing}")
        folder = self.table_dir(table)
        for col in spec.partition_by:
            folder = folder / f"{col}={safe_name(partition[col])}"
        return folder

    def shard_path(self, table: str, partition: Mapping[str, str], shard: str) -> Path:
        return self.partition_dir(table, partition) / f"{safe_name(shard)}.parquet"

    def write(
        self,
        table: str,
        data: pa.Table | Iterable[Mapping],
        shard: str,
        partition: Mapping[str, str] | None = None,
    ) -> Path:
        """Write one shard atomically, with its manifest entry; an existing shard of the same
        name is replaced whole.

        The partition comes from the rows' partition columns; pass ``partition`` to write an
        empty shard (so a rerun that yields no rows still replaces what an earlier run wrote).
        """
        spec = table_spec(table)
        rows = conform(table, data)
        if rows.num_rows or partition is None:
            found = {col: _single_value(table, rows, col) for col in spec.partition_by}
            if partition is not None and dict(partition) != found:
                raise ValueError(f"{table}: rows belong to partition {found}, not {dict(partition)}")
            partition = found
        path = self.shard_path(table, partition, shard)
        path.parent.mkdir(parents=True, exist_ok=True)
        with commit_shard(self.root, path, rows.num_rows) as staged:
            write_parquet(rows, staged, compression="zstd")
        if self.store:
            try:
                self.store.push(path)
            except BaseException:
                # Not in the store: not recorded here either, so the shard counts as unwritten
                # (a rerun writes it again) rather than done on this machine only.
                manifest_path(self.root, path).unlink(missing_ok=True)
                raise
        return path

    def merge(
        self,
        table: str,
        data: pa.Table | Iterable[Mapping],
        shard: str,
        partition: Mapping[str, str],
        keep: tuple[str, ...] = (),
    ) -> Merged:
        """Add rows to a shard, never removing one: the shard becomes its rows whose key (the
        table's ``key``) the new rows do not have, plus the new rows. A new row wins over an
        old one with the same key (a corrected source), except in the ``keep`` columns, where a
        non-null old value stays (a question never moves partition).

        The read-union-write holds the shard's lock, so concurrent merges all land. A merge
        that changes nothing leaves the file (and its manifest entry) untouched.
        """
        spec = table_spec(table)
        rows = conform(table, data)
        path = self.shard_path(table, partition, shard)
        with self.locked(table, partition, shard):
            old = conform(table, pq.read_table(path)) if path.exists() else spec.schema.empty_table()
            merged = union_rows(old, rows, spec.key, keep)
            if merged.changed:
                self.write(table, merged.rows, shard, partition)
        return merged

    def locked(self, table: str, partition: Mapping[str, str], shard: str):
        """The lock ``merge`` holds on one shard, for other read-modify-writes of it."""
        names = [safe_name(partition[col]) for col in table_spec(table).partition_by]
        return exclusive(lock_path(self.root, table, *names, safe_name(shard)))

    def files(self, table: str, **partition: str) -> list[Path]:
        """A table's Parquet files, sorted by path; none is an empty list, not an error.

        Without partition values, every file under the table's folder at any depth (``check``
        must see a file put in the wrong place too). With them (``files("sft_examples",
        run_id=...)``), the files ``write`` put in that partition's folder (``partition_dir``);
        a column the table is not partitioned by is a ValueError naming the table.
        """
        if not partition:
            folder = self.table_dir(table)
            return sorted(folder.rglob("*.parquet")) if folder.exists() else []
        columns = table_spec(table).partition_by
        unknown = sorted(set(partition) - set(columns))
        if unknown:
            raise ValueError(f"{table}: not partitioned by {unknown}; its partition columns are {list(columns)}")
        return sorted(self.partition_dir(table, partition).glob("*.parquet"))

    def glob(self, table: str) -> str:
        depth = "/".join("*" for _ in table_spec(table).partition_by)
        return str(self.table_dir(table) / depth / "*.parquet")

    def read(self, table: str, **equals: str) -> pa.Table:
        """A table's rows (optionally filtered on columns by equality), in its schema."""
        spec = table_spec(table)
        folder = self.table_dir(table)
        for col in spec.partition_by:  # prune to the partition asked for, when it is asked for
            folder = folder / (f"{col}={safe_name(equals[col])}" if col in equals else "*")
        files = sorted(Path(p) for p in globmod.glob(str(folder / "*.parquet")))
        if not files:
            return spec.schema.empty_table()
        parts = [conform(table, pq.read_table(path)) for path in files]
        rows = pa.concat_tables(parts)
        for column, value in equals.items():
            keep = pc.equal(rows.column(column), value)
            # Most asks are of a partition the folders already pruned to: every row matches, and
            # filtering would only copy the whole table (half the time of a 10 M-row read).
            if pc.all(keep, skip_nulls=False).as_py() is not True:
                rows = rows.filter(keep)
        return rows

    def tables(self) -> list[str]:
        return list(TABLES)


@dataclass(frozen=True)
class Merged:
    """A shard after ``merge``: its rows, how many were added or replaced, and how many
    replaced rows kept an old value of a ``keep`` column that the new row had otherwise."""

    rows: pa.Table
    added: int
    replaced: int
    kept: int
    changed: bool


def _keys(rows: pa.Table, key: tuple[str, ...]) -> pa.Array:
    """One comparable value per row for a (possibly composite) key."""
    if len(key) == 1:
        return pc.cast(rows.column(key[0]), pa.string()).combine_chunks()
    parts = [pc.cast(rows.column(col), pa.string()) for col in key]
    return pc.binary_join_element_wise(*parts, "\x1f").combine_chunks()


def _keep_old(
    new: pa.Table, new_keys: pa.Array, old: pa.Table, old_keys: pa.Array, keep: tuple[str, ...]
) -> tuple[pa.Table, int]:
    """``new`` with each ``keep`` column taken from the old row of the same key where that is
    not null; and how many rows that changed."""
    lookup = pa.table({"_k": old_keys, **{c: old.column(c) for c in keep}})
    probe = pa.table({"_k": new_keys, "_i": pa.array(range(new.num_rows), pa.int64())})
    joined = probe.join(lookup, "_k", join_type="left outer").sort_by("_i")
    moved = pa.array([False] * new.num_rows)
    for col in keep:
        old_values, new_values = joined.column(col), new.column(col)
        differs = pc.fill_null(pc.not_equal(old_values, new_values), pc.is_valid(old_values))
        moved = pc.or_(moved, differs)
        new = new.set_column(new.schema.get_field_index(col), col, pc.coalesce(old_values, new_values))
    return new, pc.sum(pc.cast(moved, pa.int64())).as_py() or 0


def union_rows(old: pa.Table, new: pa.Table, key: tuple[str, ...], keep: tuple[str, ...] = ()) -> Merged:
    """Old rows the new ones do not replace, then the new rows (see ``Warehouse.merge``)."""
    old_keys, new_keys = _keys(old, key), _keys(new, key)
    replaced = pc.is_in(old_keys, value_set=new_keys)
    kept = 0
    if keep and old.num_rows and new.num_rows:
        new, kept = _keep_old(new, new_keys, old, old_keys, keep)
    rows = pa.concat_tables([old.filter(pc.invert(replaced)), new])
    n_replaced = pc.sum(pc.cast(replaced, pa.int64())).as_py() or 0
    overlap_new = new.filter(pc.is_in(new_keys, value_set=old_keys))
    added = new.num_rows - overlap_new.num_rows
    order = [(col, "ascending") for col in key]
    same = added == 0 and old.filter(replaced).sort_by(order).equals(overlap_new.sort_by(order))
    return Merged(rows, added, n_replaced, kept, changed=not same)


def _single_value(table: str, rows: pa.Table, column: str) -> str:
    values = rows.column(column).unique().to_pylist()
    if len(values) != 1 or values[0] is None:
        raise ValueError(
            f"{table}: a shard must hold exactly one value of partition column {column!r}, got {values[:5]}"
        )
    return str(values[0])
