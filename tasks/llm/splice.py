"""Token-exact trajectories: a multi-turn path's token ids, loss mask and behaviour log-probs,
spliced from the ``llm_calls`` rows that sampled it, never re-tokenised (docs/tokens.md).

Why: a trainer that re-tokenises a multi-turn trajectory's text trains on tokens the policy may
never have produced (a word sampled as two tokens re-tokenises as one) and with contexts the
engine never saw. Every call records the prompt ids it sent and the ids it sampled
(``llm_calls``), so a path of calls c_1 … c_K is spliced from them:

    token_ids = P_1, then for each k < K: the first m_k tokens of C_k (loss mask 1), then the rest
                of P_{k+1} after P_k and those m_k tokens (mask 0: the template's separators and
                the observation), then C_K whole (mask 1)

where P_k and C_k are call k's prompt and sampled ids and m_k the length of the longest common
prefix of C_k and what P_{k+1} holds after P_k. The result is exactly P_K followed by C_K, the
context and sample of the last call, so every mask-1 token stands where it was sampled, after
the very context it was sampled in. Sampled tokens the next prompt did not keep (the tail a
stop string cut, or text the next prompt tokenised differently) are left out and counted in
``dropped_sampled_tokens``. This needs each prompt to extend the one before (a chat template
that appends turns); when one does not, or a call lacks token ids (an engine that gives none, a
row written before schema 9), the token columns are null: nothing is invented.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# the llm_calls columns an exporter reads to splice token ids
CALL_COLUMNS = ("call_id", "prompt_token_ids", "completion_token_ids", "completion_logprobs", "tokenizer_fingerprint")
TRAJECTORY_TOKEN_COLUMNS = (
    "prompt_token_ids",
    "completion_token_ids",
    "loss_mask",
    "behaviour_logprobs",
    "step_token_spans",
    "dropped_sampled_tokens",
    "tokenizer_fingerprint",
)


def calls_by_id(rows: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """call_id -> ``llm_calls`` row (a call several shards copied is the same call)."""
    return {row["call_id"]: row for row in rows}


def no_tokens() -> dict[str, Any]:
    """The token columns of a trajectory whose calls cannot be spliced."""
    return dict.fromkeys(TRAJECTORY_TOKEN_COLUMNS)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def path_calls(call_ids: Sequence[str | None], calls: Mapping[str, Mapping[str, Any]]) -> list[Mapping] | None:
    """The calls of a path's steps, in order; None when one is unknown or has no token ids, or
    when they came from different tokenizers."""
    rows = [calls.get(cid) if cid else None for cid in call_ids]
    if not rows or any(
        r is None or r.get("prompt_token_ids") is None or r.get("completion_token_ids") is None for r in rows
    ):
        return None
    if len({r.get("tokenizer_fingerprint") for r in rows}) > 1:
        return None
    return rows


def splice(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The token columns of a path of calls (module docstring), or ``no_tokens()`` when a
    prompt does not extend the one before it."""
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float | None] = []
    spans, dropped = [], 0
    for k, row in enumerate(rows):
        prompt, sampled = list(row["prompt_token_ids"]), list(row["completion_token_ids"])
        if k + 1 < len(rows):
            following = list(rows[k + 1]["prompt_token_ids"])
            if following[: len(prompt)] != prompt:
                return no_tokens()
            rest = following[len(prompt) :]
            kept = common_prefix(sampled, rest)
            gap = rest[kept:]
        else:
            kept, gap = len(sampled), []
        dropped += len(sampled) - kept
        spans.append({"token_start": len(ids), "token_end": len(ids) + kept})
        sampled_logprobs = row.get("completion_logprobs")
        ids += sampled[:kept] + gap
        mask += [1] * kept + [0] * len(gap)
        logprobs += list(sampled_logprobs[:kept]) if sampled_logprobs is not None else [None] * kept
        logprobs += [None] * len(gap)
    has_logprobs = all(r.get("completion_logprobs") is not None for r in rows)
    return {
        "prompt_token_ids": list(rows[0]["prompt_token_ids"]),
        "completion_token_ids": ids,
        "loss_mask": mask,
        "behaviour_logprobs": logprobs if has_logprobs else None,
        "step_token_spans": spans,
        "dropped_sampled_tokens": dropped,
        "tokenizer_fingerprint": rows[0].get("tokenizer_fingerprint"),
    }


def trajectory_tokens(call_ids: Sequence[str | None], calls: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The token columns of a path whose steps' calls are ``call_ids``."""
    rows = path_calls(call_ids, calls)
    return no_tokens() if rows is None else splice(rows)


def prompt_tokens(call_ids: Iterable[str | None], calls: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``prompt_token_ids`` and ``tokenizer_fingerprint`` of a prompt, from the first of its
    calls (``call_ids``: the calls made on it) that recorded them; nulls when none did."""
    for cid in call_ids:
        row = calls.get(cid) if cid else None
        if row is not None and row.get("prompt_token_ids") is not None:
            return {
                "prompt_token_ids": list(row["prompt_token_ids"]),
                "tokenizer_fingerprint": row.get("tokenizer_fingerprint"),
            }
    return {"prompt_token_ids": None, "tokenizer_fingerprint": None}
