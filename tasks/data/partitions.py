"""Held-out partitions of the ``questions`` table: train, valid and test, by a hash of each question.

A build expands ``train`` questions and an evaluation answers ``test`` ones (``valid`` is for
model selection), so a trained policy is never scored on what it trained on. The partition of a
question depends on nothing but (seed, dataset, question id), so it is the same on every machine,
whatever the order of the file and whatever else the warehouse holds. The rule, written out so
anyone can check a question by hand:

    digest = sha256(f"{seed}\\x1f{dataset}\\x1f{question_id}".encode("utf-8"))
    u      = int.from_bytes(digest[:8], "big") / 2**64              # uniform in [0, 1)
    train if u < shares.train, valid if u < shares.train + shares.valid, else test

``u`` is stored as ``sample_key``: builds and evaluations take "the first N questions" of a
partition in ``sample_key`` order, so a small build is a uniform sample, not the head of a file,
and growing N keeps the questions a smaller N took. A dataset can instead put every question in
one partition: an evaluation-only set (Bamboogle's 125 questions are a test set in the
literature), or a file that is one split of a dataset shipped as separate train and dev files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PARTITIONS = ("train", "valid", "test")
SEPARATOR = "\x1f"  # ASCII unit separator: cannot occur in a dataset name, so fields never run together
COLUMNS = ("partition", "sample_key")


@dataclass(frozen=True)
class PartitionRule:
    """How one dataset's questions are partitioned."""

    seed: int = 0  # changes every assignment at once; keep it fixed for a warehouse's lifetime
    train: float = 0.8  # 80/10/10: the usual split when a benchmark ships no train set of its own
    valid: float = 0.1  # enough to pick a checkpoint; the bundled samples give ~130 questions
    test: float = 0.1  # held out for the reported figures
    fixed: str | None = None  # every question in this partition (evaluation-only set, or a split file)

    def __post_init__(self):
        shares = (self.train, self.valid, self.test)
        if min(shares) < 0 or abs(sum(shares) - 1.0) > 1e-9:
            raise ValueError(f"partition shares train/valid/test must be >= 0 and sum to 1, got {shares}")
        if self.fixed is not None and self.fixed not in PARTITIONS:
            raise ValueError(f"PartitionRule.fixed must be one of {PARTITIONS} or None, got {self.fixed!r}")


def sample_keys(dataset: str, question_ids: Iterable[str], seed: int = 0) -> np.ndarray:
    """``u`` in [0, 1) of each question: the first 64 bits of its SHA-256, as a fraction."""
    prefix = f"{seed}{SEPARATOR}{dataset}{SEPARATOR}"
    words = [int.from_bytes(hashlib.sha256((prefix + q).encode("utf-8")).digest()[:8], "big") for q in question_ids]
    return np.asarray(words, dtype=np.uint64).astype(np.float64) / 2.0**64


def assign_partitions(dataset: str, question_ids: Sequence[str], rule: PartitionRule) -> tuple[list[str], np.ndarray]:
    """(partition, sample_key) of each question, in order."""
    keys = sample_keys(dataset, question_ids, rule.seed)
    if rule.fixed is not None:
        return [rule.fixed] * len(keys), keys
    index = np.searchsorted(np.array([rule.train, rule.train + rule.valid]), keys, side="right")
    return [PARTITIONS[i] for i in index], keys


def with_partitions(rows: list[dict], rule: PartitionRule) -> list[dict]:
    """``questions`` rows with their ``partition`` and ``sample_key`` set (one dataset per call)."""
    if not rows:
        return rows
    datasets = {row["dataset"] for row in rows}
    if len(datasets) != 1:
        raise ValueError(f"with_partitions: rows of one dataset at a time, got {sorted(datasets)}")
    partitions, keys = assign_partitions(rows[0]["dataset"], [row["question_id"] for row in rows], rule)
    return [{**row, "partition": p, "sample_key": float(k)} for row, p, k in zip(rows, partitions, keys)]


def lacks_partitions(table: pa.Table) -> bool:
    """Whether ``questions`` rows were written before partitions existed (or any row has none)."""
    if any(column not in table.column_names for column in COLUMNS):
        return table.num_rows > 0
    return any(table.column(column).null_count for column in COLUMNS)


def backfill_partitions(table: pa.Table, rule: PartitionRule) -> pa.Table:
    """A ``questions`` table of one dataset with every missing partition assigned by ``rule``.

    Rows that already have a partition keep it: a backfill never moves a question.
    """
    if not table.num_rows:
        return table
    [dataset] = table.column("dataset").unique().to_pylist()
    partitions, keys = assign_partitions(dataset, table.column("question_id").to_pylist(), rule)
    fresh = {"partition": pa.array(partitions, pa.string()), "sample_key": pa.array(keys, pa.float64())}
    for column, values in fresh.items():
        if column in table.column_names:
            values = pc.coalesce(table.column(column), values)
            table = table.drop_columns([column])
        table = table.append_column(column, values)
    return table
