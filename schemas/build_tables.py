"""The tables a build writes: the ingested inputs (``questions``, ``passages``, ``rejects``)
and what searching them leaves (``nodes``, ``rollouts``, ``llm_calls``, ``retrievals``,
``rewards``, ``plans``, ``plan_scores``)."""

from __future__ import annotations

import pyarrow as pa

from ragfactory.schemas.columns import MESSAGES, STRINGS, TS, TableSpec, spec

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
MATCHED_PAIR = pa.struct([("predicted", pa.int32()), ("gold", pa.int32()), ("similarity", pa.float64())])

BUILD_TABLES: list[TableSpec] = [
    spec(
        "questions",
        ("dataset",),
        ("question_id",),
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
    spec(
        "passages",
        ("source",),
        ("passage_id",),
        ("passage_id", pa.string()),
        ("source", pa.string()),
        ("title", pa.string()),
        ("text", pa.string()),
    ),
    spec(
        "rejects",
        ("dataset",),
        ("source_file", "line"),
        ("dataset", pa.string()),
        ("source_file", pa.string()),
        ("line", pa.int64()),
        ("reason", pa.string()),
        ("raw", pa.string()),
    ),
    spec(
        "nodes",
        ("run_id",),
        ("node_id",),
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
    spec(
        "rollouts",
        ("run_id",),
        ("rollout_id",),
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
        ("metric", pa.string()),  # the answer metric the strategy scored with (its config's metric)
        ("metric_score", pa.float64()),  # final_answer under that metric
    ),
    spec(
        "llm_calls",
        ("run_id",),
        ("call_id",),
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
        # who asked (request metadata, never part of call_id) and whether another run generated it
        ("strategy", pa.string()),
        ("question_id", pa.string()),
        ("node_id", pa.string()),
        ("cached", pa.bool_()),
        # what the engine saw and sampled, so a trainer never re-tokenises (docs/tokens.md); null
        # where the engine gives none (logprobs) and in rows written before schema 9
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("completion_token_ids", pa.list_(pa.int32())),
        ("completion_logprobs", pa.list_(pa.float32())),
        ("tokenizer_fingerprint", pa.string()),  # tokenizer vocabulary and chat template digest
    ),
    spec(
        "retrievals",
        ("run_id",),
        ("retrieval_id",),
        ("retrieval_id", pa.string()),
        ("run_id", pa.string()),
        ("strategy", pa.string()),
        ("question_id", pa.string()),
        ("node_id", pa.string()),  # the node holding the returned passages, when one does
        ("query", pa.string()),
        ("retriever", pa.string()),  # the retriever kind
        ("index_fingerprint", pa.string()),  # kind, corpus digest and parameters (tasks/retrieval/ledger.py)
        ("k", pa.int32()),
        ("passage_ids", STRINGS),
        ("scores", pa.list_(pa.float64())),
        ("titles", STRINGS),
        ("texts", STRINGS),
        ("latency_s", pa.float64()),
        ("cached", pa.bool_()),  # answered by a retrieval another run made
        ("cache_key", pa.string()),  # kind + index fingerprint + query + k
    ),
    spec(
        "rewards",
        ("run_id",),
        ("reward_id",),
        ("reward_id", pa.string()),
        ("run_id", pa.string()),
        ("question_id", pa.string()),
        ("strategy", pa.string()),
        ("node_id", pa.string()),
        ("name", pa.string()),  # relevance, format, process (their sum) or outcome
        ("value", pa.float64()),
        ("scale", pa.float64()),  # the trajectory's λ_T (R3-RAG Eq. 4) where the reward is scaled
        ("scaled", pa.float64()),  # value · scale
        ("is_format_error", pa.bool_()),  # a judge's verdict that did not read (value 0)
        ("error", pa.string()),
        ("llm_call_id", pa.string()),  # the judge's call
    ),
    spec(
        "plans",
        ("run_id",),
        ("plan_id",),
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
    spec(
        "plan_scores",
        ("run_id",),
        ("plan_id",),
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
]
