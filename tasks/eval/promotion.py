"""Whether a candidate model replaces the incumbent: a paired bootstrap on held-out questions.

The nightly pipeline (``flows/nightly.py``, docs/flywheel.md) trains a candidate each night and
evaluates it and the incumbent (the promoted model) on the same questions of the **valid**
partition; model selection never reads test. Per question the delta is candidate − incumbent
of one metric (EM, F1 or cover-EM in one mode). The candidate is promoted only when the
percentile bootstrap 95 % interval of the mean delta (questions resampled with replacement, a
fixed seed) lies above zero. Otherwise the incumbent stays:

- **missing**: either model has no scores on the valid questions they share;
- **tie**: the two are the same model, or every question's delta is zero;
- **not significant**: the interval reaches zero or below.

``p`` is the one-sided bootstrap p-value of "the candidate is no better": the share of
resampled mean deltas at or below zero, (count + 1) / (resamples + 1) so it is never 0. The
intervals of ``eval_compare`` (``tasks/eval/compare.py``) are BCa; a percentile interval here
keeps the decision rule readable: every resampled mean of all-positive deltas is positive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

PROMOTE, KEEP = "promote", "keep"
# the evals columns a promotion may compare
METRICS = ("em", "f1", "cover_em")


@dataclass(frozen=True)
class PromotionConfig:
    """What the decision compares and how sure it must be."""

    metric: str = "f1"  # token F1 credits partial answers, so small models move it night to night
    mode: str = "agentic"  # the mode the build's data trains: search and answer (ReasonRAG Alg. 1)
    confidence: float = 0.95  # the usual 95 % interval
    n_resamples: int = 4999  # interval ends move by < 0.01 between seeds at a few hundred questions
    seed: int = 0  # the same evaluations give the same decision
    chunk: int = 500  # resamples drawn at once: memory is chunk x questions, not n_resamples x questions

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"promotion.metric must be em, f1 or cover_em, got {self.metric!r}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"promotion.confidence must be in (0, 1), got {self.confidence}")


@dataclass(frozen=True)
class Decision:
    decision: str  # promote | keep
    reason: str
    n: int = 0
    delta: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p: float | None = None


def bootstrap_means(deltas: np.ndarray, config: PromotionConfig) -> np.ndarray:
    """``n_resamples`` means of ``deltas`` resampled with replacement, ``chunk`` at a time."""
    rng = np.random.default_rng(config.seed)
    means, left = [], config.n_resamples
    while left:
        size = min(left, config.chunk)
        means.append(deltas[rng.integers(0, len(deltas), (size, len(deltas)))].mean(axis=1))
        left -= size
    return np.concatenate(means)


def decide(
    candidate: Mapping[str, float],
    incumbent: Mapping[str, float],
    config: PromotionConfig = PromotionConfig(),
    same_model: bool = False,
) -> Decision:
    """The decision from per-question scores (question id -> metric) of the two models."""
    shared = sorted(set(candidate) & set(incumbent))
    if not shared:
        which = [name for name, scores in (("candidate", candidate), ("incumbent", incumbent)) if not scores]
        missing = " and ".join(which) or "the two models on the same questions"
        return Decision(KEEP, f"missing evaluation: no {config.metric} of {missing} on the valid partition")
    deltas = np.array([candidate[q] - incumbent[q] for q in shared], dtype=np.float64)
    delta = float(deltas.mean())
    if same_model or not deltas.any():
        why = "the candidate is the incumbent" if same_model else "every question scores the same"
        return Decision(KEEP, f"tie: {why}", len(shared), delta, delta, delta, 1.0)
    means = bootstrap_means(deltas, config)
    alpha = 1.0 - config.confidence
    low, high = (float(x) for x in np.quantile(means, [alpha / 2, 1 - alpha / 2]))
    p = float((np.sum(means <= 0) + 1) / (len(means) + 1))
    interval = f"{config.confidence:.0%} interval of the {config.metric} delta [{low:+.4f}, {high:+.4f}]"
    if low > 0:
        return Decision(PROMOTE, f"{interval} lies above zero", len(shared), delta, low, high, p)
    return Decision(KEEP, f"{interval} does not lie above zero", len(shared), delta, low, high, p)


def promotion_row(
    pipeline: str,
    night: str,
    candidate: str,
    incumbent: str,
    config: PromotionConfig,
    decision: Decision,
    created_at,
    build_run_id: str | None = None,
) -> dict:
    """The ``promotions`` row of one night's decision; ``promoted`` is the model it leaves in place."""
    promoted = candidate if decision.decision == PROMOTE else incumbent
    return {
        "pipeline": pipeline,
        "night": night,
        "build_run_id": build_run_id,
        "candidate": candidate,
        "incumbent": incumbent,
        "metric": config.metric,
        "mode": config.mode,
        "n": decision.n,
        "delta": decision.delta,
        "ci_low": decision.ci_low,
        "ci_high": decision.ci_high,
        "p": decision.p,
        "decision": decision.decision,
        "reason": decision.reason,
        "promoted": promoted,
        "created_at": created_at,
    }
