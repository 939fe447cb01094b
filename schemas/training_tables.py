"""The tables a model is trained and judged on: the training data a build exports
(``preference_pairs``, ``sft_examples``, ``grpo_prompts``, ``trajectories``, ``step_labels``,
``verl_prompts``) and its ``contamination`` check, then the ``models`` trained, their ``evals``,
the paired comparisons of two models (``eval_compare``) and the nightly pipeline's
``promotions``."""

from __future__ import annotations

import pyarrow as pa

from ragfactory.schemas.columns import MESSAGES, STRINGS, TS, TableSpec, spec

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
# token offsets [token_start, token_end) of a step's sampled tokens in completion_token_ids
TOKEN_SPAN = pa.struct([("token_start", pa.int32()), ("token_end", pa.int32())])
# a prompt's token ids as the engine rendered them (docs/tokens.md); null where no call recorded them
PROMPT_TOKEN_COLUMNS = (("prompt_token_ids", pa.list_(pa.int32())), ("tokenizer_fingerprint", pa.string()))
# verl's RL data columns, as Search-R1's data scripts write them (tasks/export/verl.py)
VERL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")
VERL_REWARD_MODEL = pa.struct([("style", pa.string()), ("ground_truth", pa.struct([("target", STRINGS)]))])
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

TRAINING_TABLES: list[TableSpec] = [
    spec(
        "preference_pairs",
        ("run_id",),
        ("pair_id",),
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
    spec(
        "sft_examples",
        ("run_id",),
        ("example_id",),
        ("example_id", pa.string()),
        ("run_id", pa.string()),
        ("question_id", pa.string()),
        ("strategy", pa.string()),
        ("messages", MESSAGES),
        ("node_ids", STRINGS),
    ),
    spec(
        "grpo_prompts",
        ("run_id",),
        ("prompt_id",),
        ("prompt_id", pa.string()),
        ("run_id", pa.string()),
        ("question_id", pa.string()),
        ("strategy", pa.string()),
        ("task", pa.string()),
        ("prompt", MESSAGES),
        ("golden_answers", STRINGS),
        ("gold_plan", pa.string()),
        ("node_ids", STRINGS),
        *PROMPT_TOKEN_COLUMNS,
    ),
    spec(
        "trajectories",
        ("run_id",),
        ("trajectory_id",),
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
        # the path as the engine saw and sampled it (tasks/llm/splice.py); null when its calls
        # recorded no token ids. loss_mask and behaviour_logprobs align with completion_token_ids.
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("completion_token_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),  # 1: sampled by the policy; 0: template and observation
        ("behaviour_logprobs", pa.list_(pa.float32())),  # the engine's, null at mask 0
        ("step_token_spans", pa.list_(TOKEN_SPAN)),  # aligned with step_spans
        ("dropped_sampled_tokens", pa.int32()),  # sampled tokens the next turn's prompt did not keep
        ("tokenizer_fingerprint", pa.string()),
    ),
    spec(
        "step_labels",
        ("run_id",),
        ("label_id",),
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
    spec(
        "verl_prompts",
        ("run_id",),
        ("prompt_id",),
        ("prompt_id", pa.string()),
        ("run_id", pa.string()),
        ("question_id", pa.string()),
        ("data_source", pa.string()),
        ("prompt", MESSAGES),
        ("ability", pa.string()),
        ("reward_model", VERL_REWARD_MODEL),
        ("extra_info", VERL_EXTRA_INFO),
        *PROMPT_TOKEN_COLUMNS,  # beside the five verl columns; the verl parquet keeps the five
    ),
    spec(
        "export_skips",
        ("run_id",),
        ("run_id", "strategy", "exporter", "question_id", "reason"),
        ("run_id", pa.string()),
        ("question_id", pa.string()),
        ("strategy", pa.string()),
        ("exporter", pa.string()),  # the table the exporter writes
        ("reason", pa.string()),
    ),
    spec(
        "contamination",
        ("run_id",),
        ("contamination_id",),
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
    spec(
        "models",
        ("run_id",),
        ("model_id",),
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
    spec(
        "evals",
        ("run_id",),
        ("eval_id",),
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
    spec(
        "eval_compare",
        ("run_id",),
        ("run_id", "dataset", "mode"),
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
    # one row per night of a nightly pipeline: the candidate against the incumbent on valid
    spec(
        "promotions",
        ("pipeline",),
        ("pipeline", "night"),
        ("pipeline", pa.string()),
        ("night", pa.string()),
        ("build_run_id", pa.string()),  # the night's build, whose exports trained the candidate
        ("candidate", pa.string()),
        ("incumbent", pa.string()),
        ("metric", pa.string()),
        ("mode", pa.string()),
        ("n", pa.int64()),
        ("delta", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("p", pa.float64()),
        ("decision", pa.string()),
        ("reason", pa.string()),
        ("promoted", pa.string()),  # the model promoted after this night: candidate or incumbent
        ("created_at", TS),
    ),
]
