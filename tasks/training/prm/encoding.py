"""A PRM's input layout: one ``step_labels`` row tokenised with its labels on step separators.

    input_ids = prompt · step_1 · SEP · step_2 · SEP · … · step_k · SEP
    labels    = -100 everywhere, but label(step_i) (1 good, 0 bad) on the LAST token of each SEP

The separator is ``"\\n"`` as tokenised alone (SmolLM2: one token, 198; TRL's
``PRMConfig.step_separator`` default); a step's score is read at it. Each piece is tokenised on its
own and the ids concatenated (the prompt with the tokenizer's own special tokens, steps and
separators without), so a step's tokens never merge with its neighbours' and training and scoring
see the same ids.

Over ``max_length``: trailing steps are dropped whole while the kept steps leave less than
``min(len(prompt), max_length // 2)`` tokens for the prompt, then the prompt is cut from the left
(the Search-R1 prompt ends with the question, which this keeps). A kept step always keeps its
label; a row where not even its first step fits keeps no step (``positions`` is empty).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SEPARATOR = "\n"
IGNORE_INDEX = -100
GOOD = 1
ID2LABEL = {0: "bad", 1: "good"}


@dataclass(frozen=True)
class EncodedRow:
    """One row's ids and labels, and where each kept step's score is read."""

    input_ids: list[int]
    labels: list[int]
    positions: list[int]  # the last separator token of each kept step
    steps_dropped: int = 0
    prompt_cut: int = 0


def checked_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's ``label_id``, ``prompt``, ``completions`` and ``labels``, checked against each other."""
    label_id = row.get("label_id")
    missing = [c for c in ("label_id", "prompt", "completions", "labels") if row.get(c) is None]
    if missing:
        raise ValueError(f"step_labels row {label_id!r}: missing {missing}")
    steps, labels = [str(s) for s in row["completions"]], list(row["labels"])
    if len(labels) != len(steps):
        raise ValueError(f"step_labels row {label_id!r}: {len(labels)} labels for {len(steps)} steps")
    if not steps:
        raise ValueError(f"step_labels row {label_id!r}: no step")
    if any(label not in (True, False) for label in labels):
        raise ValueError(f"step_labels row {label_id!r}: labels must be booleans, got {labels}")
    return {
        "label_id": str(label_id),
        "prompt": str(row["prompt"]),
        "completions": steps,
        "labels": [bool(label) for label in labels],
    }


def separator_ids(tokenizer) -> list[int]:
    return tokenizer(SEPARATOR, add_special_tokens=False)["input_ids"]


def kept_steps(prompt_len: int, step_lens: Sequence[int], max_length: int | None) -> int:
    """How many leading steps fit beside a prompt reserve of min(prompt, max_length // 2) tokens."""
    if max_length is None:
        return len(step_lens)
    budget, total = max_length - min(prompt_len, max_length // 2), 0
    for kept, length in enumerate(step_lens):
        total += length
        if total > budget:
            return kept
    return len(step_lens)


def encode_steps(
    tokenizer, prompt: str, steps: Sequence[str], labels: Sequence[bool] | None = None, max_length: int | None = None
) -> EncodedRow:
    """The module docstring's layout; ``labels`` None (scoring) leaves every label -100."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    separator = separator_ids(tokenizer)
    pieces = [tokenizer(step, add_special_tokens=False)["input_ids"] + separator for step in steps]
    kept = kept_steps(len(prompt_ids), [len(p) for p in pieces], max_length)
    step_total = sum(len(p) for p in pieces[:kept])
    room = len(prompt_ids) if max_length is None else max(0, max_length - step_total)
    cut = max(0, len(prompt_ids) - room)
    ids, tags, positions = list(prompt_ids[cut:]), [IGNORE_INDEX] * (len(prompt_ids) - cut), []
    for i, piece in enumerate(pieces[:kept]):
        ids += piece
        positions.append(len(ids) - 1)
        tags += [IGNORE_INDEX] * (len(piece) - 1) + [IGNORE_INDEX if labels is None else int(labels[i])]
    return EncodedRow(ids, tags, positions, len(steps) - kept, cut)
