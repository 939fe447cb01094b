"""Two models on the same questions: EM and F1 deltas with paired bootstrap intervals, McNemar on EM.

The decisive figure of a build is "the policy trained on it beats its base". Both models answer
the same test questions in the same modes, so the comparison is paired: each question contributes
one (a, b) pair of scores. Per (dataset, mode):

- the mean EM and F1 of each model and their deltas (a - b);
- a 95 % interval for each delta: ``scipy.stats.bootstrap`` with ``paired=True``, which resamples
  questions (the pairs stay together), BCa by default, a fixed seed so the interval is
  repeatable; when every pair differs by the same amount the interval is that amount (the
  bootstrap distribution is a single point and BCa is undefined);
- McNemar's exact test on EM: with n_a_only questions right for a only and n_b_only right for b
  only, the two-sided binomial test of n_a_only successes in n_a_only + n_b_only trials at 1/2
  (``scipy.stats.binomtest``); p = 1 when no question is discordant. The concordant questions
  carry no information about which model is better, so they do not enter the test.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import polars as pl
from scipy import stats


@dataclass(frozen=True)
class CompareConfig:
    """How the intervals and the test are computed."""

    n_resamples: int = 9999  # scipy's default; the interval ends move by < 0.005 between seeds
    confidence: float = 0.95  # the usual 95 % interval
    method: str = "BCa"  # scipy's default: corrects the percentile interval's bias and skew
    seed: int = 0  # a fixed seed: the same evals give the same interval

    def __post_init__(self):
        if self.method not in ("BCa", "percentile", "basic"):
            raise ValueError(f"CompareConfig.method must be BCa, percentile or basic, got {self.method!r}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"CompareConfig.confidence must be in (0, 1), got {self.confidence}")


def mean_difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def paired_interval(a: np.ndarray, b: np.ndarray, config: CompareConfig = CompareConfig()) -> tuple[float, float]:
    """The bootstrap interval of mean(a) - mean(b), resampling pairs."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) != len(b) or not len(a):
        raise ValueError(f"paired_interval: need two equally long, non-empty samples, got {len(a)} and {len(b)}")
    differences = a - b
    if np.all(differences == differences[0]):
        return float(differences[0]), float(differences[0])
    result = stats.bootstrap(
        (a, b),
        mean_difference,
        paired=True,
        vectorized=True,
        n_resamples=config.n_resamples,
        confidence_level=config.confidence,
        method=config.method,
        rng=np.random.default_rng(config.seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def mcnemar_exact(a_correct: np.ndarray, b_correct: np.ndarray) -> tuple[int, int, float]:
    """(right for a only, right for b only, exact two-sided p-value)."""
    a_correct, b_correct = np.asarray(a_correct, dtype=bool), np.asarray(b_correct, dtype=bool)
    a_only, b_only = int(np.sum(a_correct & ~b_correct)), int(np.sum(~a_correct & b_correct))
    if a_only + b_only == 0:
        return a_only, b_only, 1.0
    return a_only, b_only, float(stats.binomtest(a_only, a_only + b_only, 0.5).pvalue)


def compare_pairs(em_a, em_b, f1_a, f1_b, config: CompareConfig = CompareConfig()) -> dict:
    """The comparison of one (dataset, mode): means, deltas, intervals, McNemar."""
    em_a, em_b, f1_a, f1_b = (np.asarray(x, dtype=np.float64) for x in (em_a, em_b, f1_a, f1_b))
    em_low, em_high = paired_interval(em_a, em_b, config)
    f1_low, f1_high = paired_interval(f1_a, f1_b, config)
    a_only, b_only, p = mcnemar_exact(em_a >= 0.5, em_b >= 0.5)
    return {
        "n": len(em_a),
        "em_a": float(em_a.mean()),
        "em_b": float(em_b.mean()),
        "em_delta": float(em_a.mean() - em_b.mean()),
        "em_delta_low": em_low,
        "em_delta_high": em_high,
        "f1_a": float(f1_a.mean()),
        "f1_b": float(f1_b.mean()),
        "f1_delta": float(f1_a.mean() - f1_b.mean()),
        "f1_delta_low": f1_low,
        "f1_delta_high": f1_high,
        "n_a_only": a_only,
        "n_b_only": b_only,
        "mcnemar_p": p,
    }


def compare_run_id(run_a: str, run_b: str) -> str:
    return "compare-" + hashlib.sha256(json.dumps([run_a, run_b]).encode()).hexdigest()[:16]


def compare_rows(
    rows_a: Iterable[Mapping], rows_b: Iterable[Mapping], config: CompareConfig, created_at: datetime
) -> list[dict]:
    """One ``eval_compare`` row per (dataset, mode) the two runs share, over the questions both
    answered; ``rows_a`` / ``rows_b`` are the ``evals`` rows of model a's and model b's run."""
    columns = ["run_id", "model_id", "dataset", "mode", "partition", "question_id", "em", "f1"]
    a = pl.DataFrame([{c: r[c] for c in columns} for r in rows_a], schema_overrides={"partition": pl.String})
    b = pl.DataFrame([{c: r[c] for c in columns} for r in rows_b], schema_overrides={"partition": pl.String})
    if not a.height or not b.height:
        return []
    pairs = a.join(b, on=["dataset", "mode", "question_id"], suffix="_b").sort("dataset", "mode", "question_id")
    out = []
    for (dataset, mode), group in pairs.group_by(["dataset", "mode"], maintain_order=True):
        run_a, run_b = group["run_id"][0], group["run_id_b"][0]
        out.append(
            {
                "run_id": compare_run_id(run_a, run_b),
                "model_a": group["model_id"][0],
                "model_b": group["model_id_b"][0],
                "run_a": run_a,
                "run_b": run_b,
                "dataset": dataset,
                "mode": mode,
                "partition": group["partition"][0],
                **compare_pairs(group["em"], group["em_b"], group["f1"], group["f1_b"], config),
                "n_resamples": config.n_resamples,
                "confidence": config.confidence,
                "method": config.method,
                "seed": config.seed,
                "created_at": created_at,
            }
        )
    return out
