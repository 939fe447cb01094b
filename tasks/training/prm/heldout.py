"""The PRM's held-out rows and what its scores on them measure.

A row is held back when sha256(label_id) read as a fraction of 2**64 is below ``heldout_fraction``
(default 0.1); with two rows or more at least one is held back (the lowest hash) and at least one
trains (the highest). After training the trainer scores them (``trainer.PRMTrainer``):
``prm_heldout_accuracy`` (P(good) > 0.5 against the label), ``prm_heldout_steps``,
``prm_heldout_mean_good`` and ``prm_heldout_mean_bad`` (a mean with no step to average is left
out, never NaN).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence


def split_key(label_id: str) -> float:
    """sha256 of the id, its first 8 bytes as a fraction of 2**64: uniform and stable across runs."""
    return int.from_bytes(hashlib.sha256(label_id.encode("utf-8")).digest()[:8], "big") / 2**64


def heldout_ids(label_ids: Iterable[str], fraction: float) -> set[str]:
    """The label ids held back from training (see the module docstring)."""
    ids = sorted(set(label_ids), key=split_key)
    if len(ids) < 2 or fraction <= 0:
        return set()
    held = {i for i in ids if split_key(i) < fraction} or {ids[0]}
    held.discard(ids[-1])
    return held


def heldout_metrics(labels: Sequence[Sequence[bool]], scores: Sequence[Sequence[float]]) -> dict[str, float]:
    """Accuracy of P(good) > 0.5 and the mean score of good and of bad steps; steps cut by
    ``max_length`` (no score) are not counted."""
    pairs = [
        (label, score) for row_labels, row_scores in zip(labels, scores) for label, score in zip(row_labels, row_scores)
    ]
    metrics = {"prm_heldout_steps": float(len(pairs))}
    if pairs:
        metrics["prm_heldout_accuracy"] = sum((s > 0.5) == lab for lab, s in pairs) / len(pairs)
    for name, wanted in (("prm_heldout_mean_good", True), ("prm_heldout_mean_bad", False)):
        chosen = [s for lab, s in pairs if lab == wanted]
        if chosen:
            metrics[name] = sum(chosen) / len(chosen)
    return metrics
