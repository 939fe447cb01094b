"""Training datasets from warehouse exports, in the formats TRL's trainers read (docs/architecture.md, "Exports").

SFT examples are conversational ``messages``. SmolLM2's chat template has no ``{% generation %}``
markers, so TRL's ``assistant_only_loss`` cannot mask it; instead each assistant turn becomes one
conversational prompt/completion row (the turns before it as prompt, the turn as completion) and
TRL's ``completion_only_loss`` masks every prompt token. That trains every assistant turn, and only
those. DPO reads ``prompt``/``chosen``/``rejected``; GRPO reads ``prompt`` plus the ground-truth
columns its reward functions receive as keyword arguments.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def export_files(root: str | Path, table: str, run_id: str | None, parquet: str | None) -> list[Path]:
    """The parquet files of a run's export (or of a given file or folder), sorted.

    A run's export is the run's partition of ``table`` as the warehouse lays it out
    (``Warehouse.files``), which also refuses a table it does not know, naming it.
    """
    if parquet is not None:
        path = Path(parquet).expanduser()
        files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    else:
        from ragfactory.warehouse.store import Warehouse

        files = Warehouse(root).files(table, run_id=run_id)
    files = [f for f in files if f.is_file()]
    if not files:
        where = parquet if parquet is not None else f"{table} of run {run_id!r} under {root}"
        raise FileNotFoundError(f"no export to train on: no parquet files in {where}")
    return files


def snapshot_hash(files: list[Path]) -> str:
    """A content hash of an export: the same rows in the same files hash the same."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def method_columns(method: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the columns a method reads, those of them it can do without), from its spec."""
    from ragfactory.tasks.training.methods import method_spec

    spec = method_spec(method)
    return spec.columns + spec.optional, spec.optional


def read_export(files: list[Path], method: str, task: str | None = None) -> list[dict]:
    """The rows of an export with the columns a method trains on; a missing column is an error.

    ``task`` keeps only the rows of that ``task`` (GRPO exports mix answer and planner prompts).
    """
    columns, optional = method_columns(method)
    tables = [pq.read_table(f) for f in files]
    for path, table in zip(files, tables):
        missing = [c for c in columns if c not in table.column_names and c not in optional]
        if missing:
            raise ValueError(f"{path}: a {method} export needs column(s) {missing}")
    wanted = [[c for c in columns if c in t.column_names] for t in tables]
    rows = pa.concat_tables([t.select(w) for t, w in zip(tables, wanted)], promote_options="default")
    rows = rows.to_pylist()
    if task is not None:
        rows = [row for row in rows if row.get("task") == task]
        if not rows:
            raise ValueError(f"the {method} export has no rows of task {task!r}")
    return rows


def sft_prompt_completions(rows: list[dict]) -> list[dict]:
    """One prompt/completion row per assistant turn of each conversation."""
    out = []
    for index, row in enumerate(rows):
        messages = row["messages"] or []
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not turns:
            raise ValueError(f"sft row {index}: no assistant turn to train on")
        for i in turns:
            out.append({"prompt": messages[:i], "completion": [messages[i]]})
    return out


def training_dataset(rows: list[dict], method: str):
    """A ``datasets.Dataset`` in the format of the method's TRL trainer (its spec's ``prepare``)."""
    import datasets

    from ragfactory.tasks.training.methods import method_spec

    rows = method_spec(method).prepared(rows)
    if not rows:
        raise ValueError(f"the {method} export has no rows")
    return datasets.Dataset.from_list(rows)
