"""Exported rows longer than a trainer's default maximum length, each a warning naming the flag
to raise (the trainers and versions of ``docs/clients.md``).

A trainer that meets a row over its limit drops it (OpenRLHF: the prompt's tokens must stay under
``--data.max_len`` − 2, so its DPO default of 512 silently drops long pairs), stops (verl's
``data.truncation: error`` when a prompt exceeds ``data.max_prompt_length``), or truncates it
(TRL, LLaMA-Factory: the end of the answer is lost). None of them says so at export time; the
export task logs these lines so the user raises the limit before training.

Lengths are counted in tokens by ``count`` (a tokenizer's, for an exact answer); without one the
estimate is one token per four characters of message text, the usual rule of thumb for English
BPE vocabularies, so the line says "about".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Messages = Sequence[Mapping[str, Any]]
CHARS_PER_TOKEN = 4  # rule-of-thumb estimate when no tokenizer is given


@dataclass(frozen=True)
class ClientLimit:
    """One trainer's default maximum on one exported table."""

    client: str
    table: str
    default: int
    flag: str
    effect: str
    prompt_only: bool  # the limit bounds the prompt (OpenRLHF, verl), else prompt and response
    # rows longer than ``default - margin`` tokens are over: OpenRLHF keeps a prompt only under
    # max_len - 2 tokens (2 for the answer), so at most max_len - 3
    margin: int = 0


LIMITS: tuple[ClientLimit, ...] = (
    ClientLimit("OpenRLHF train_sft", "sft_examples", 2048, "--data.max_len", "drops", True, 3),
    ClientLimit("OpenRLHF train_dpo", "preference_pairs", 512, "--data.max_len", "drops", True, 3),
    ClientLimit("verl main_ppo", "verl_prompts", 512, "data.max_prompt_length", "stops on", True),
    ClientLimit("LLaMA-Factory", "sft_examples", 2048, "cutoff_len", "truncates", False),
    ClientLimit("LLaMA-Factory", "preference_pairs", 2048, "cutoff_len", "truncates", False),
    ClientLimit("TRL SFTTrainer", "sft_examples", 1024, "max_length", "truncates", False),
    ClientLimit("TRL DPOTrainer", "preference_pairs", 1024, "max_length", "truncates", False),
)


def estimate_tokens(messages: Messages) -> int:
    """About how many tokens the messages' text is (``CHARS_PER_TOKEN``)."""
    return -(-sum(len(m.get("content") or "") for m in messages) // CHARS_PER_TOKEN)


def _parts(table: str, row: Mapping[str, Any], prompt_only: bool) -> Messages:
    """The messages of ``row`` a limit bounds: the prompt, or the prompt and the (longer) answer."""
    if table == "preference_pairs":
        prompt = list(row["prompt"])
        answers = max((list(row["chosen"]), list(row["rejected"])), key=estimate_tokens)
        return prompt if prompt_only else prompt + answers
    messages = list(row.get("messages") or row.get("prompt") or [])
    return messages[:-1] if prompt_only and table == "sft_examples" else messages


def length_warnings(
    tables: Mapping[str, Iterable[Mapping[str, Any]]], count: Callable[[Messages], int] | None = None
) -> list[str]:
    """One line per trainer default that some exported rows exceed, with the flag to raise."""
    counter = count or estimate_tokens
    about = "" if count else "about "
    lines = []
    for limit in LIMITS:
        rows = list(tables.get(limit.table) or [])
        lengths = [counter(_parts(limit.table, row, limit.prompt_only)) for row in rows]
        over = [n for n in lengths if n > limit.default - limit.margin]
        if over:
            lines.append(
                f"{limit.client} {limit.effect} {len(over)} of {len(rows)} {limit.table} rows at its "
                f"default {limit.flag} {limit.default} (longest {about}{max(over)} tokens): "
                f"raise {limit.flag}"
            )
    return lines
