"""One pyarrow schema per warehouse table (DESIGN.md "Core contracts" and "Warehouse").

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
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

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
SCHEMA_VERSION = 4

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
MESSAGES = pa.list_(MESSAGE)
STRINGS = pa.list_(pa.string())

GOLD_STEP = pa.struct(
    [
        ("step", pa.int32()),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("paragraph_support_idx", pa.int32()),
    ]
)
PLAN_STEP = pa.struct(
    [
        ("step", pa.int32()),
        ("question", pa.string()),
        ("original", pa.string()),
        ("depends_on", pa.list_(pa.int32())),
    ]
)
MATCHED_PAIR = pa.struct(
    [("predicted", pa.int32()), ("gold", pa.int32()), ("similarity", pa.float64())]
)

TS = pa.timestamp("us", tz="UTC")

# one ingested source a run read: the dataset (or corpus source) and its version (ingests.version)
RUN_INPUT = pa.struct([("dataset", pa.string()), ("version", pa.string())])

# character offsets [char_start, char_end) into a response ("end" is an SQL keyword)
SPAN = pa.struct([("char_start", pa.int32()), ("char_end", pa.int32())])
STEP_SPAN = pa.struct(
    [
        ("node_id", pa.string()),
        ("char_start", pa.int32()),
        ("char_end", pa.int32()),
        ("advantage", pa.float64()),
    ]
)
# verl's RL data columns, as Search-R1's data scripts write them (tasks/export/verl.py)
VERL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")
VERL_REWARD_MODEL = pa.struct(
    [("style", pa.string()), ("ground_truth", pa.struct([("target", STRINGS)]))]
)
VERL_EXTRA_INFO = pa.struct(
    [
        ("split", pa.string()),
        ("index", pa.int64()),
        ("question_id", pa.string()),
        ("run_id", pa.string()),
        ("strategy", pa.string()),
        ("node_ids", STRINGS),
    ]
)


@dataclass(frozen=True)
class TableSpec:
    """A warehouse table: its schema, the columns partitioning it, and its primary key."""

    name: str
    schema: pa.Schema
    partition_by: tuple[str, ...]
    key: tuple[str, ...]


def _spec(name: str, partition_by: tuple[str, ...], key: tuple[str, ...], *fields) -> TableSpec:
    return TableSpec(name, pa.schema(list(fields)), partition_by, key)


TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in [
        _spec(
            "runs", ("run_id",), ("run_id",),
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
        ),
        _spec(
            "ingests", ("dataset",), ("version",),
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
        _spec(
            "questions", ("dataset",), ("question_id",),
            ("question_id", pa.string()),
            ("dataset", pa.string()),
            ("split", pa.string()),
            ("question", pa.string()),
            ("golden_answers", STRINGS),
            ("gold_plan", pa.list_(GOLD_STEP)),
            ("metadata", pa.string()),
            ("source_file", pa.string()),
            ("source_line", pa.int64()),
            ("partition", pa.string()),
            ("sample_key", pa.float64()),
        ),
        _spec(
            "passages", ("source",), ("passage_id",),
            ("passage_id", pa.string()),
            ("source", pa.string()),
            ("title", pa.string()),
            ("text", pa.string()),
        ),
        _spec(
            "rejects", ("dataset",), ("source_file", "line"),
            ("dataset", pa.string()),
            ("source_file", pa.string()),
            ("line", pa.int64()),
            ("reason", pa.string()),
            ("raw", pa.string()),
        ),
        _spec(
            "nodes", ("run_id",), ("node_id",),
            ("node_id", pa.string()),
            ("run_id", pa.string()),
            ("question_id", pa.string()),
            ("parent_id", pa.string()),
            ("path", pa.string()),
            ("depth", pa.int32()),
            ("strategy", pa.string()),
            ("kind", pa.string()),
            ("text", pa.string()),
            ("parsed", pa.string()),
            ("passage_ids", STRINGS),
            ("llm_call_id", pa.string()),
            ("is_format_error", pa.bool_()),
            ("format_error", pa.string()),
            ("is_leaf", pa.bool_()),
            ("reward", pa.float64()),
            ("visits", pa.int64()),
            ("value", pa.float64()),
            ("advantage", pa.float64()),
            ("is_selected", pa.bool_()),
        ),
        _spec(
            "rollouts", ("run_id",), ("rollout_id",),
            ("rollout_id", pa.string()),
            ("run_id", pa.string()),
            ("question_id", pa.string()),
            ("node_id", pa.string()),
            ("text", pa.string()),
            ("final_answer", pa.string()),
            ("em", pa.float64()),
            ("f1", pa.float64()),
            ("n_steps", pa.int32()),
            ("llm_call_ids", STRINGS),
            ("seed", pa.int64()),
        ),
        _spec(
            "llm_calls", ("run_id",), ("call_id",),
            ("call_id", pa.string()),
            ("run_id", pa.string()),
            ("role", pa.string()),
            ("model_fingerprint", pa.string()),
            ("messages", MESSAGES),
            ("sampling", pa.string()),
            ("seed", pa.int64()),
            ("sample_index", pa.int32()),
            ("text", pa.string()),
            ("finish_reason", pa.string()),
            ("prompt_tokens", pa.int32()),
            ("completion_tokens", pa.int32()),
            ("latency_s", pa.float64()),
            ("created_at", TS),
        ),
        _spec(
            "plans", ("run_id",), ("plan_id",),
            ("plan_id", pa.string()),
            ("run_id", pa.string()),
            ("question_id", pa.string()),
            ("source", pa.string()),
            ("steps", pa.list_(PLAN_STEP)),
            ("text", pa.string()),
            ("is_format_error", pa.bool_()),
            ("format_error", pa.string()),
            ("llm_call_id", pa.string()),
        ),
        _spec(
            "plan_scores", ("run_id",), ("plan_id",),
            ("plan_id", pa.string()),
            ("run_id", pa.string()),
            ("question_id", pa.string()),
            ("gold_plan_id", pa.string()),
            ("precision", pa.float64()),
            ("recall", pa.float64()),
            ("f1", pa.float64()),
            ("tau", pa.float64()),
            ("matched", pa.list_(MATCHED_PAIR)),
            ("embedder", pa.string()),
        ),
        _spec(
            "preference_pairs", ("run_id",), ("pair_id",),
            ("pair_id", pa.string()),
            ("run_id", pa.string()),
            ("question_id", pa.string()),
            ("strategy", pa.string()),
            ("decision", pa.string()),
            ("prompt", MESSAGES),
            ("chosen", MESSAGES),
            ("rejected", MESSAGES),
            ("chosen_value", pa.float64()),
            ("rejected_value", pa.float64()),
            ("gap", pa.float64()),
            ("chosen_node_id", pa.string()),
            ("rejected_node_id", pa.string()),
        ),
        _spec(
            "sft_examples", ("run_id",), ("example_id",),
            ("example_id", pa.string()),
            ("run_id", pa.string()),
            ("question_id", pa.string()),
            ("strategy", pa.string()),
            ("messages", MESSAGES),
            ("node_ids", STRINGS),
        ),
        _spec(
            "grpo_prompts", ("run_id",), ("prompt_id",),
            ("prompt_id", pa.string()),
            ("run_id", pa.string()),
            ("question_id", pa.string()),
            ("strategy", pa.string()),
            ("task", pa.string()),
            ("prompt", MESSAGES),
            ("golden_answers", STRINGS),
            ("gold_plan", pa.string()),
            ("node_ids", STRINGS),
        ),
        _spec(
            "trajectories", ("run_id",), ("trajectory_id",),
            ("trajectory_id", pa.string()),
            ("run_id", pa.string()),
            ("question_id", pa.string()),
            ("strategy", pa.string()),
            ("leaf_node_id", pa.string()),
            ("node_ids", STRINGS),
            ("prompt", MESSAGES),
            ("messages", MESSAGES),
            ("response", pa.string()),
            ("step_spans", pa.list_(STEP_SPAN)),
            ("observation_spans", pa.list_(SPAN)),
            ("advantages", pa.list_(pa.float64())),
            ("reward", pa.float64()),
            ("n_steps", pa.int32()),
            ("is_sampled", pa.bool_()),
            ("sample_seed", pa.int64()),
        ),
        _spec(
            "step_labels", ("run_id",), ("label_id",),
            ("label_id", pa.string()),
            ("run_id", pa.string()),
            ("question_id", pa.string()),
            ("strategy", pa.string()),
            ("prompt", pa.string()),
            ("completions", STRINGS),
            ("labels", pa.list_(pa.bool_())),
            ("step_values", pa.list_(pa.float64())),
            ("node_ids", STRINGS),
        ),
        _spec(
            "verl_prompts", ("run_id",), ("prompt_id",),
            ("prompt_id", pa.string()),
            ("run_id", pa.string()),
            ("question_id", pa.string()),
            ("data_source", pa.string()),
            ("prompt", MESSAGES),
            ("ability", pa.string()),
            ("reward_model", VERL_REWARD_MODEL),
            ("extra_info", VERL_EXTRA_INFO),
        ),
        _spec(
            "contamination", ("run_id",), ("contamination_id",),
            ("contamination_id", pa.string()),
            ("run_id", pa.string()),
            ("strategy", pa.string()),
            ("export_table", pa.string()),
            ("row_id", pa.string()),
            ("question_id", pa.string()),
            ("question", pa.string()),
            ("eval_question_id", pa.string()),
            ("eval_question", pa.string()),
            ("eval_source", pa.string()),
            ("method", pa.string()),
            ("score", pa.float64()),
            ("judged", pa.bool_()),
            ("action", pa.string()),
        ),
        _spec(
            "models", ("run_id",), ("model_id",),
            ("model_id", pa.string()),
            ("run_id", pa.string()),
            ("lineage", pa.string()),
            ("base_model", pa.string()),
            ("method", pa.string()),
            ("export_snapshot", pa.string()),
            ("config", pa.string()),
            ("metrics", pa.string()),
            ("path", pa.string()),
            ("created_at", TS),
            ("question_ids", STRINGS),
        ),
        _spec(
            "evals", ("run_id",), ("eval_id",),
            ("eval_id", pa.string()),
            ("run_id", pa.string()),
            ("model_id", pa.string()),
            ("dataset", pa.string()),
            ("mode", pa.string()),
            ("question_id", pa.string()),
            ("prediction", pa.string()),
            ("em", pa.float64()),
            ("f1", pa.float64()),
            ("cover_em", pa.float64()),
            ("n_retrievals", pa.int32()),
            ("n_steps", pa.int32()),
            ("format_error", pa.string()),
            ("llm_call_ids", STRINGS),
            ("created_at", TS),
            ("partition", pa.string()),
            ("is_seen", pa.bool_()),
        ),
        _spec(
            "eval_compare", ("run_id",), ("run_id", "dataset", "mode"),
            ("run_id", pa.string()),
            ("model_a", pa.string()),
            ("model_b", pa.string()),
            ("run_a", pa.string()),
            ("run_b", pa.string()),
            ("dataset", pa.string()),
            ("mode", pa.string()),
            ("partition", pa.string()),
            ("n", pa.int64()),
            ("em_a", pa.float64()),
            ("em_b", pa.float64()),
            ("em_delta", pa.float64()),
            ("em_delta_low", pa.float64()),
            ("em_delta_high", pa.float64()),
            ("f1_a", pa.float64()),
            ("f1_b", pa.float64()),
            ("f1_delta", pa.float64()),
            ("f1_delta_low", pa.float64()),
            ("f1_delta_high", pa.float64()),
            ("n_a_only", pa.int64()),
            ("n_b_only", pa.int64()),
            ("mcnemar_p", pa.float64()),
            ("n_resamples", pa.int64()),
            ("confidence", pa.float64()),
            ("method", pa.string()),
            ("seed", pa.int64()),
            ("created_at", TS),
        ),
    ]
}


def table_spec(name: str) -> TableSpec:
    """The spec of a warehouse table, or a clear error naming the known tables."""
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known tables: {', '.join(sorted(TABLES))}") from None
