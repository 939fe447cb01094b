"""The bookkeeping tables: ``runs`` (one row per build or evaluation run: its config, its status
and the ingests it read) and ``ingests`` (one row per ingested source version, with its question
ids)."""

from __future__ import annotations

import pyarrow as pa

from ragfactory.schemas.columns import STRINGS, TS, TableSpec, spec

# one ingested source a run read: the dataset (or corpus source) and its version (ingests.version)
RUN_INPUT = pa.struct([("dataset", pa.string()), ("version", pa.string())])

RUN_TABLES: list[TableSpec] = [
    spec(
        "runs",
        ("run_id",),
        ("run_id",),
        ("run_id", pa.string()),
        ("flow", pa.string()),
        ("status", pa.string()),
        ("schema_version", pa.int32()),
        ("config_hash", pa.string()),
        ("config", pa.string()),
        ("started_at", TS),
        ("finished_at", TS),
        ("failed_shards", STRINGS),
        ("error", pa.string()),
        ("warnings", STRINGS),
        ("inputs", pa.list_(RUN_INPUT)),
        ("flow_run_id", pa.string()),  # the Prefect flow run that ran it (None outside Prefect)
    ),
    spec(
        "ingests",
        ("dataset",),
        ("version",),
        ("version", pa.string()),
        ("dataset", pa.string()),
        ("kind", pa.string()),
        ("source_file", pa.string()),
        ("source_sha256", pa.string()),
        ("options", pa.string()),
        ("n_questions", pa.int64()),
        ("n_passages", pa.int64()),
        ("n_rejects", pa.int64()),
        ("question_ids", STRINGS),
        ("warnings", STRINGS),
        ("created_at", TS),
    ),
]
