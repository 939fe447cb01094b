"""LLaMA-Factory datasets from the SFT and DPO exports (DecEx-RAG §2.3, R3-RAG and APEX-Searcher
cold starts, which trained with LLaMA-Factory).

LLaMA-Factory reads a folder through its ``dataset_info.json``: one entry per dataset, naming the
file and how its columns map. ``write_llamafactory`` writes a run's rows into
``artifacts/llamafactory/<run>/`` as the shards a strategy exports, ``<strategy>_sft.parquet``
(``sft_examples`` rows as they are) and ``<strategy>_dpo.parquet`` (``preference_pairs`` rows
with the prompt as ``messages`` and chosen / rejected as single messages, the only pair layout
its sharegpt reader takes), and rebuilds the folder's ``dataset_info.json`` from the shards
present. Both use the sharegpt formatting with OpenAI-style tags (``role``/``content``,
``user``/``assistant``/``system``); the DPO entries are ``ranking`` data. A training YAML sets
``dataset_dir`` to the folder and ``dataset`` to entry names (``decex_sft`` or ``decex_dpo``,
several joined by commas).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ragfactory.warehouse.integrity import committed, forget
from ragfactory.warehouse.locks import exclusive
from ragfactory.warehouse.store import conform, safe_name

INFO_FILE = "dataset_info.json"
LOCK_FILE = ".dataset_info.lock"  # held while one strategy's export rewrites the shared info file
KINDS = {"sft": "sft_examples", "dpo": "preference_pairs"}  # entry suffix -> warehouse table
TAGS = {
    "role_tag": "role",
    "content_tag": "content",
    "user_tag": "user",
    "assistant_tag": "assistant",
    "system_tag": "system",
}
MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])


def dataset_entry(kind: str, file_name: str) -> dict[str, Any]:
    """The ``dataset_info.json`` entry of one shard: sharegpt messages, DPO shards as ranking data."""
    if kind not in KINDS:
        raise ValueError(f"a LLaMA-Factory shard is one of {sorted(KINDS)}, got {kind!r}")
    columns = {"messages": "messages"}
    entry: dict[str, Any] = {"file_name": file_name, "formatting": "sharegpt"}
    if kind == "dpo":
        entry["ranking"] = True
        columns |= {"chosen": "chosen", "rejected": "rejected"}
    return entry | {"columns": columns, "tags": dict(TAGS)}


def pair_table(rows: pa.Table | Iterable[Mapping[str, Any]]) -> pa.Table:
    """``preference_pairs`` rows in LLaMA-Factory's ranking layout: ``prompt`` becomes ``messages``
    and chosen / rejected, one assistant message each, become single messages."""
    table = conform("preference_pairs", rows)
    singles = {}
    for side in ("chosen", "rejected"):
        values = table.column(side).to_pylist()
        bad = [i for i, messages in enumerate(values) if len(messages) != 1]
        if bad:
            raise ValueError(
                f"preference_pairs row {bad[0]}: {side} holds {len(values[bad[0]])} "
                "messages; LLaMA-Factory's ranking data takes one"
            )
        singles[side] = pa.array([messages[0] for messages in values], type=MESSAGE)
    table = table.rename_columns(["messages" if n == "prompt" else n for n in table.column_names])
    for side, column in singles.items():
        table = table.set_column(table.column_names.index(side), side, column)
    return table


def write_llamafactory(
    folder: str | Path,
    strategy: str,
    tables: Mapping[str, pa.Table | Iterable[Mapping[str, Any]]],
    root: Path | None = None,
) -> dict[str, Any]:
    """Write one strategy's SFT and DPO shards into ``folder`` and rebuild its ``dataset_info.json``
    (returned); under a warehouse ``root``, each file with its manifest entry
    (``warehouse.exported``). A table with no rows leaves no shard; a table not given is left as
    it is."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with exclusive(folder / LOCK_FILE):
        for kind, table_name in KINDS.items():
            if table_name not in tables:
                continue
            path = folder / f"{safe_name(strategy)}_{kind}.parquet"
            table = pair_table(tables[table_name]) if kind == "dpo" else conform(table_name, tables[table_name])
            if table.num_rows == 0:
                forget(root, path)
                continue
            with committed(path, root, table.num_rows) as tmp:
                pq.write_table(table, tmp)
        info = dataset_info(folder)
        with committed(folder / INFO_FILE, root) as tmp:
            tmp.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return info


def dataset_info(folder: str | Path) -> dict[str, Any]:
    """The entries of the shards in ``folder``, named after their files (``decex_sft``)."""
    info = {}
    for path in sorted(Path(folder).glob("*.parquet")):
        kind = path.stem.rsplit("_", 1)[-1]
        if kind in KINDS:
            info[path.stem] = dataset_entry(kind, path.name)
    return info
