"""A hand-worked comparison of two models on ten questions.

    question   1  2  3  4  5  6  7  8  9  10
    EM a       1  1  1  1  0  1  1  0  0  0     mean 0.6
    EM b       0  0  0  0  1  1  1  0  0  0     mean 0.3     delta 0.3
    F1 a       1  1  1  1 .5  1  1  0  0 .25    mean 0.675
    F1 b       0 .5  0  0  1  1  1  0  0  0     mean 0.35    delta 0.325

Discordant on EM: questions 1-4 right for a only (4), question 5 right for b only (1). McNemar's
exact test: X ~ Binomial(5, 1/2), two-sided p = P(X <= 1) + P(X >= 4) = (1 + 5 + 5 + 1) / 32 = 0.375.

The EM differences are (1, 1, 1, 1, -1, 0, 0, 0, 0, 0): mean 0.3, population sd sqrt(0.5 - 0.09)
= 0.640, standard error 0.202, so a normal interval is 0.3 +- 0.397 = [-0.097, 0.697]. The
bootstrap can only produce multiples of 0.1 here; with seed 0 its BCa interval is [-0.1, 0.7]
(pinned). It contains 0, as it should at p = 0.375: ten questions cannot tell these models apart.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from ragfactory.tasks.eval.compare import (
    CompareConfig,
    compare_pairs,
    compare_rows,
    mcnemar_exact,
    paired_interval,
)

EM_A = [1, 1, 1, 1, 0, 1, 1, 0, 0, 0]
EM_B = [0, 0, 0, 0, 1, 1, 1, 0, 0, 0]
F1_A = [1, 1, 1, 1, 0.5, 1, 1, 0, 0, 0.25]
F1_B = [0, 0.5, 0, 0, 1, 1, 1, 0, 0, 0]
NOW = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def test_ten_questions_by_hand():
    result = compare_pairs(EM_A, EM_B, F1_A, F1_B)
    assert result["n"] == 10
    assert (result["em_a"], result["em_b"]) == (pytest.approx(0.6), pytest.approx(0.3))
    assert result["em_delta"] == pytest.approx(0.3)
    assert (result["f1_a"], result["f1_b"], result["f1_delta"]) == (
        pytest.approx(0.675),
        pytest.approx(0.35),
        pytest.approx(0.325),
    )
    assert (result["n_a_only"], result["n_b_only"]) == (4, 1)
    assert result["mcnemar_p"] == 0.375
    assert (result["em_delta_low"], result["em_delta_high"]) == (pytest.approx(-0.1), pytest.approx(0.7))
    assert result["f1_delta_low"] < result["f1_delta"] < result["f1_delta_high"]


def test_the_interval_is_repeatable_and_its_seed_matters_little():
    first = paired_interval(np.array(EM_A), np.array(EM_B), CompareConfig(seed=0))
    assert paired_interval(np.array(EM_A), np.array(EM_B), CompareConfig(seed=0)) == first
    other = paired_interval(np.array(F1_A), np.array(F1_B), CompareConfig(seed=1))
    assert other == pytest.approx(paired_interval(np.array(F1_A), np.array(F1_B)), abs=0.03)


def test_mcnemar_exact_cases():
    assert mcnemar_exact([1, 1, 1, 1, 0], [0, 0, 0, 0, 1]) == (4, 1, 0.375)
    assert mcnemar_exact([1, 0], [1, 0]) == (0, 0, 1.0)  # no discordant question
    assert mcnemar_exact([1] * 6, [0] * 6)[2] == pytest.approx(2 / 64)  # 2 * (1/2)^6


def test_identical_differences_give_a_point_interval():
    assert paired_interval(np.ones(5), np.zeros(5)) == (1.0, 1.0)
    assert paired_interval(np.zeros(5), np.zeros(5)) == (0.0, 0.0)
    with pytest.raises(ValueError, match="equally long"):
        paired_interval(np.ones(3), np.ones(2))


def test_rows_pair_questions_per_dataset_and_mode():
    def rows(run, model, em, f1, questions):
        return [
            {
                "run_id": run,
                "model_id": model,
                "dataset": "d",
                "mode": "direct",
                "partition": "test",
                "question_id": q,
                "em": e,
                "f1": f,
            }
            for q, e, f in zip(questions, em, f1)
        ]

    ids = [f"q{i:02d}" for i in range(10)]
    a = rows("eval-a", "sft-1", EM_A, F1_A, ids) + rows("eval-a", "sft-1", [1.0], [1.0], ["only-a"])
    b = rows("eval-b", "embedded", EM_B[::-1], F1_B[::-1], ids[::-1])  # other order, same pairs
    [row] = compare_rows(a, b, CompareConfig(), NOW)
    assert (row["model_a"], row["model_b"], row["n"], row["partition"]) == ("sft-1", "embedded", 10, "test")
    assert (row["n_a_only"], row["n_b_only"], row["mcnemar_p"]) == (4, 1, 0.375)
    assert row["em_delta"] == pytest.approx(0.3) and row["run_id"].startswith("compare-")
    assert compare_rows(a, [], CompareConfig(), NOW) == []
