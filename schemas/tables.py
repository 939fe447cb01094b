"""One pyarrow schema per warehouse table (docs/architecture.md, "Warehouse").

Writers cast to these schemas and refuse what does not fit. Changes are additive only: a new
column is appended with a default of null, and ``SCHEMA_VERSION`` goes up by one; the version a
run was written with is kept in its ``runs`` row. Reward and value columns are float64 (DOUBLE)
so DuckDB never hands them back as Decimal.

Each table also names the columns that partition it on disk (hive style). Run-scoped tables are
partitioned by ``run_id``; the ingested inputs (questions, passages, rejects) by their source, and
an ingest adds its rows to that source's shard by key (``Warehouse.merge``): the shard never holds
a second copy of a row, and never loses one that an earlier run read. Which rows one ingest
produced is its ``ingests`` row, named by its version (``tasks/data/versions.py``); a run lists
the versions it read in ``runs.inputs``.

The schemas themselves are in three modules beside this one, which gathers them in ``TABLES``:
``run_tables.py`` (runs, ingests), ``build_tables.py`` (the ingested inputs and the search
tables) and ``training_tables.py`` (the exported training data, models and evaluations);
``columns.py`` has ``TableSpec`` and the column types they share.
"""

from __future__ import annotations

from ragfactory.schemas.build_tables import BUILD_TABLES, GOLD_STEP, MATCHED_PAIR, PLAN_STEP
from ragfactory.schemas.columns import MESSAGE, MESSAGES, STRINGS, TS, TableSpec
from ragfactory.schemas.run_tables import RUN_INPUT, RUN_TABLES
from ragfactory.schemas.training_tables import (
    SPAN,
    STEP_SPAN,
    TRAINING_TABLES,
    VERL_COLUMNS,
    VERL_EXTRA_INFO,
    VERL_REWARD_MODEL,
)

# 2: TreePS-RAG tables trajectories, step_labels and verl_prompts (no column changed).
# 3: held-out partitions: questions.partition and questions.sample_key (files written before are
#    backfilled in place, tasks/data/partitions.py), runs.warnings; what a model saw:
#    models.question_ids (null before: the model_questions view derives them from the lineage),
#    evals.partition and evals.is_seen; the contamination table (training rows that match an
#    evaluation question); the eval_compare table (two models on the same questions).
# 4: isolation between builds: the ingests table (one row per ingested source version, with its
#    question ids) and runs.inputs (the versions a run read); ingest adds to the questions,
#    passages and rejects shards instead of replacing them. Older shards read as they are:
#    runs.inputs is null there (such a run took every question of its datasets).
# 5: the rewards table (per-node rewards with their scale: R3-RAG's judged relevance, format,
#    process and outcome rewards). Shards written before have no rewards file.
# 6: runs.flow_run_id (the Prefect flow run behind a run, for the dashboard's link; null before).
# 7: the promotions table (each night's candidate against the promoted model on valid).
# 8: the retrievals table (the retrieval ledger and cache); llm_calls.strategy, question_id,
#    node_id and cached; rollouts.metric and metric_score; the export_skips table (why an exporter
#    gave a question no row). Older files read with them null.
# 9: token-exact calls: llm_calls.prompt_token_ids, completion_token_ids, completion_logprobs and
#    tokenizer_fingerprint; trajectories carry token ids, loss mask and behaviour log-probs, and
#    grpo_prompts and verl_prompts the prompt's token ids (docs/tokens.md). Older files read them null.
SCHEMA_VERSION = 9

# Bookkeeping, then what a build writes, then training and evaluation: `ragfactory tables` lists
# them in this order.
TABLES: dict[str, TableSpec] = {table.name: table for table in [*RUN_TABLES, *BUILD_TABLES, *TRAINING_TABLES]}

__all__ = [
    "GOLD_STEP",
    "MATCHED_PAIR",
    "MESSAGE",
    "MESSAGES",
    "PLAN_STEP",
    "RUN_INPUT",
    "SCHEMA_VERSION",
    "SPAN",
    "STEP_SPAN",
    "STRINGS",
    "TABLES",
    "TS",
    "TableSpec",
    "VERL_COLUMNS",
    "VERL_EXTRA_INFO",
    "VERL_REWARD_MODEL",
    "table_spec",
]


def table_spec(name: str) -> TableSpec:
    """The spec of a warehouse table, or a clear error naming the known tables."""
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known tables: {', '.join(sorted(TABLES))}") from None
