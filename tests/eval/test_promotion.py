"""The promotion rule worked by hand: promote only when the paired interval lies above zero."""

from __future__ import annotations

import numpy as np
import pytest

from ragfactory.tasks.eval.promotion import KEEP, PROMOTE, PromotionConfig, bootstrap_means, decide

QUESTIONS = [f"q{i}" for i in range(8)]


def scores(values) -> dict[str, float]:
    return dict(zip(QUESTIONS, values))


def test_deltas_all_positive_promote():
    # deltas 1,1,0,1,1,1,1,1: none below zero, mean 7/8
    candidate, incumbent = scores([1, 1, 0.5, 1, 1, 1, 1, 1]), scores([0, 0, 0.5, 0, 0, 0, 0, 0])
    decision = decide(candidate, incumbent)
    assert decision.decision == PROMOTE and decision.n == 8
    assert decision.delta == pytest.approx(0.875)
    # a resample of 8 draws is all zeros with probability (1/8)^8: the lower end is positive
    assert 0 < decision.ci_low <= 0.875 <= decision.ci_high == pytest.approx(1.0)
    assert decision.p == pytest.approx(1 / 5000)  # no resampled mean at or below zero
    assert "lies above zero" in decision.reason


def test_deltas_symmetric_around_zero_keep():
    candidate, incumbent = scores([1, 0, 1, 0, 1, 0, 1, 0]), scores([0, 1, 0, 1, 0, 1, 0, 1])
    decision = decide(candidate, incumbent)
    assert decision.decision == KEEP and decision.delta == 0.0
    assert decision.ci_low < 0 < decision.ci_high
    assert 0.4 < decision.p < 0.75  # about half the resampled means are at or below zero
    assert "does not lie above zero" in decision.reason


def test_ties_and_missing_evaluations_keep_the_incumbent():
    same = scores([0.5] * 8)
    tie = decide(same, dict(same))
    assert (tie.decision, tie.delta, tie.ci_low, tie.ci_high, tie.p) == (KEEP, 0.0, 0.0, 0.0, 1.0)
    assert tie.reason == "tie: every question scores the same"
    assert decide(scores([1] * 8), scores([0] * 8), same_model=True).reason == "tie: the candidate is the incumbent"
    missing = decide({}, same)
    assert (missing.decision, missing.n, missing.delta) == (KEEP, 0, None)
    assert missing.reason == "missing evaluation: no f1 of candidate on the valid partition"
    apart = decide({"a": 1.0}, {"b": 0.0})
    assert apart.decision == KEEP and "the two models on the same questions" in apart.reason


def test_only_the_shared_questions_are_paired():
    candidate = scores([1] * 8) | {"extra": 0.0}  # a question the incumbent did not answer
    decision = decide(candidate, scores([0] * 8))
    assert decision.n == 8 and decision.delta == 1.0 and decision.decision == PROMOTE


def test_the_bootstrap_is_repeatable_and_chunked_the_same_as_whole():
    deltas = np.array([1.0, -0.5, 0.25, 0.0])
    whole = bootstrap_means(deltas, PromotionConfig(n_resamples=1000, chunk=1000))
    assert whole.shape == (1000,) and np.array_equal(
        whole, bootstrap_means(deltas, PromotionConfig(n_resamples=1000, chunk=1000))
    )
    assert bootstrap_means(deltas, PromotionConfig(n_resamples=1000, chunk=300)).shape == (1000,)


def test_a_bad_metric_is_refused():
    with pytest.raises(ValueError, match="promotion.metric must be em, f1 or cover_em"):
        PromotionConfig(metric="bleu")


def test_a_night_that_trained_nothing_keeps_the_incumbent_and_says_why(tmp_path):
    from prefect.logging import disable_run_logger

    from ragfactory.tasks.nightly import promote
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    with disable_run_logger():
        row = promote.fn(str(tmp_path), "flywheel", "night-1", None, "embedded", None, "eval-1", PromotionConfig())
    assert (row["decision"], row["candidate"], row["incumbent"]) == (KEEP, "", "embedded")
    assert row["reason"] == "no candidate: nothing was trained this night"
    written = query(Warehouse(str(tmp_path)), "select decision, reason from promotions").to_pylist()
    assert written == [{"decision": KEEP, "reason": "no candidate: nothing was trained this night"}]
