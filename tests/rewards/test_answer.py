"""Tests for the answer metrics (EM, F1, cover-EM) with hand-computed cases and real data."""

import doctest
import json
from importlib.resources import files

import pytest

from ragfactory.tasks.rewards import answer
from ragfactory.tasks.rewards.answer import (
    METRICS,
    cover_exact_match,
    exact_match,
    f1_precision_recall,
    f1_score,
    normalize_answer,
    score,
)

ALL_METRICS = [exact_match, f1_score, cover_exact_match]


def _read_bamboogle() -> list[dict]:
    path = files("ragfactory.data") / "bamboogle" / "dev.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("theatre", "theatre"),
        ("The Theatre", "theatre"),
        ("An apple a day", "apple day"),
        ("Anna and Thea", "anna and thea"),
        ("U.S.A.", "usa"),
        ("Hewlett-Packard", "hewlettpackard"),
        ("rock 'n' roll", "rock n roll"),
        # Punctuation goes before articles: "the-end" -> "theend", which keeps its letters.
        ("the-end", "theend"),
        ("  New \t York\n  City ", "new york city"),
        ("George VI\n", "george vi"),
        # Only ASCII punctuation is removed, as in the official scripts (a HotpotQA answer).
        ("Denmark–Norway–Sweden", "denmark–norway–sweden"),
        ("Rudolf Höss", "rudolf höss"),
        ("The", ""),
        ("", ""),
    ],
)
def test_normalize_answer_follows_squad_hotpotqa(raw, normalized):
    assert normalize_answer(raw) == normalized


@pytest.mark.parametrize(
    ("prediction", "golden", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower", 1.0),
        ("The Eiffel Tower!", ["eiffel tower"], 1.0),
        ("the theatre", "Theatre", 1.0),
        ("theatre", "atre", 0.0),
        ("Eiffel Tower", "Eiffel Tower in Paris", 0.0),
        ("Hewlett-Packard", "Hewlett Packard", 0.0),
        ("New  York\tCity", "new york city.", 1.0),
        ("Paris", ["London", "paris", "Rome"], 1.0),
        ("Paris", ["London", "Rome"], 0.0),
    ],
)
def test_exact_match(prediction, golden, expected):
    assert exact_match(prediction, golden) == expected


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        # "eiffel tower in paris" vs "eiffel tower": 2 common of 4 and 2 tokens;
        # P = 2/4, R = 2/2, F1 = 2 * 0.5 * 1 / 1.5 = 2/3.
        ("Eiffel Tower in Paris", "the Eiffel Tower", (2 / 3, 0.5, 1.0)),
        # Tokens are multisets: "paris" x3 vs "paris france" share min(3, 1) = 1 token;
        # P = 1/3, R = 1/2, F1 = 2 * (1/6) / (5/6) = 2/5.
        ("paris paris paris", "Paris, France", (0.4, 1 / 3, 0.5)),
        # "barack obama was born in hawaii" vs "hawaii usa": 1 common of 6 and 2;
        # P = 1/6, R = 1/2, F1 = 2 * (1/12) / (4/6) = 1/4.
        ("Barack Obama was born in Hawaii", "Hawaii, USA", (0.25, 1 / 6, 0.5)),
        ("The Eiffel Tower", "eiffel tower!", (1.0, 1.0, 1.0)),
        ("London", "Paris", (0.0, 0.0, 0.0)),
        ("the", "Paris", (0.0, 0.0, 0.0)),
    ],
)
def test_f1_precision_recall_hand_computed(prediction, gold, expected):
    assert f1_precision_recall(prediction, gold) == pytest.approx(expected)
    assert f1_score(prediction, gold) == pytest.approx(expected[0])


@pytest.mark.parametrize(
    ("metric", "prediction", "golden", "expected"),
    [
        # vs "nightwing dick grayson": P = 1/1, R = 1/3, F1 = 2 * (1/3) / (4/3) = 0.5;
        # vs "dick grayson": 0; the max is 0.5.
        (f1_score, "Nightwing", ["Nightwing / Dick Grayson", "Dick Grayson"], 0.5),
        (f1_score, "Nightwing", ["Dick Grayson", "Nightwing / Dick Grayson"], 0.5),
        (f1_score, "Nightwing", ["Nightwing / Dick Grayson", "Nightwing"], 1.0),
        (exact_match, "Dick Grayson", ["Nightwing / Dick Grayson", "Dick Grayson"], 1.0),
        (cover_exact_match, "It is France.", ["Paris", "France"], 1.0),
    ],
)
def test_metrics_take_the_max_over_golden_answers(metric, prediction, golden, expected):
    assert metric(prediction, golden) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("prediction", "gold", "expected_f1"),
    [
        # Without the closed-answer rule "yes" vs "yes it is" would get P = 1, R = 1/3, F1 = 0.5.
        ("yes", "yes it is", 0.0),
        ("yes it is", "yes", 0.0),
        ("no", "no way", 0.0),
        ("no", "yes", 0.0),
        ("noanswer", "no answer", 0.0),
        ("no answer", "noanswer", 0.0),
        ("Yes.", "yes", 1.0),
        ("NO!", "no", 1.0),
        ("noanswer", "noanswer", 1.0),
        # Ordinary answers keep partial credit: P = 1/2, R = 1/1, F1 = 2/3.
        ("yesterday morning", "yesterday", 2 / 3),
    ],
)
def test_f1_closed_answers_get_no_partial_credit(prediction, gold, expected_f1):
    f1, precision, recall = f1_precision_recall(prediction, gold)
    assert f1 == pytest.approx(expected_f1)
    if expected_f1 == 0.0:
        assert (precision, recall) == (0.0, 0.0)


def test_f1_closed_answer_rule_applies_per_golden_answer():
    assert f1_score("yes", ["yes it is", "yes"]) == 1.0
    assert f1_score("yes", ["yes it is", "yes sir"]) == 0.0


@pytest.mark.parametrize(
    ("prediction", "golden", "expected"),
    [
        ("It was built in Paris.", "Paris", 1.0),
        ("a Parisian café", "Paris", 0.0),
        ("Berlin", "in", 0.0),
        ("theatre", "atre", 0.0),
        ("New York City Hall", "new york city", 1.0),
        ("the city of New York", "New York City", 0.0),
        ("York New", "New York", 0.0),
        ("the Eiffel Tower", "Tower", 1.0),
        ("Eiffel", "Eiffel Tower", 0.0),
        ("The Eiffel Tower!", "eiffel tower", 1.0),
        # Hyphens are deleted, so the span is the single token "hewlettpackard".
        ("founded Hewlett-Packard in 1939", "Hewlett Packard", 0.0),
        ("founded Hewlett-Packard in 1939", "Hewlett-Packard", 1.0),
        # No closed-answer rule in cover-EM, as in FlashRAG.
        ("yes, both did", "yes", 1.0),
    ],
)
def test_cover_exact_match_uses_token_boundaries(prediction, golden, expected):
    assert cover_exact_match(prediction, golden) == expected


@pytest.mark.parametrize(
    ("prediction", "golden", "em", "cover"),
    [
        # Both sides normalise to no tokens: equal strings, as in the official EM.
        ("a", "the", 1.0, 1.0),
        ("Paris", "the", 0.0, 0.0),
        ("", "Paris", 0.0, 0.0),
    ],
)
def test_answers_that_normalise_to_nothing(prediction, golden, em, cover):
    assert exact_match(prediction, golden) == em
    assert cover_exact_match(prediction, golden) == cover
    assert f1_score(prediction, golden) == 0.0


@pytest.mark.parametrize("metric", ALL_METRICS, ids=lambda m: m.__name__)
@pytest.mark.parametrize(
    ("prediction", "golden"),
    [(None, "Paris"), (None, ["Paris"]), ("Paris", []), ("Paris", None), ("", "Paris")],
)
def test_missing_inputs_score_zero(metric, prediction, golden):
    assert metric(prediction, golden) == 0.0


def test_f1_precision_recall_of_none_prediction_is_zero():
    assert f1_precision_recall(None, "Paris") == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("metric", ALL_METRICS, ids=lambda m: m.__name__)
def test_bad_types_raise_naming_the_field(metric):
    with pytest.raises(TypeError, match=r"golden_answers\[1\] must be str, got int"):
        metric("Paris", ["Paris", 3])
    with pytest.raises(TypeError, match="prediction must be str or None, got int"):
        metric(7, ["Paris"])


def test_golden_answers_accept_any_iterable_of_str():
    assert exact_match("Paris", ("London", "Paris")) == 1.0
    assert exact_match("Paris", (gold for gold in ["Paris"])) == 1.0


@pytest.mark.parametrize(("name", "function"), [("em", exact_match), ("f1", f1_score), ("cover_em", cover_exact_match)])
def test_score_dispatches_to_the_named_metric(name, function):
    assert METRICS[name] is function
    prediction, golden = "Eiffel Tower in Paris", ["the Eiffel Tower", "Tower of Pisa"]
    assert score(name, prediction, golden) == function(prediction, golden)


def test_score_rejects_unknown_metric_naming_valid_ones():
    assert set(METRICS) == {"em", "f1", "cover_em"}
    with pytest.raises(ValueError, match=r"unknown answer metric 'acc'; valid metrics: em, f1"):
        score("acc", "Paris", "Paris")


def test_metrics_table_is_read_only():
    with pytest.raises(TypeError):
        METRICS["acc"] = exact_match  # type: ignore[index]


def test_bamboogle_answers_score_full_marks_against_themselves():
    rows = _read_bamboogle()
    assert len(rows) == 125
    for i, row in enumerate(rows):
        gold = row["answer"]
        for metric in ALL_METRICS:
            assert metric(gold, [gold]) == 1.0, f"row {i} {metric.__name__}: {gold!r}"


def test_bamboogle_trailing_newline_answer_is_stripped():
    rows = _read_bamboogle()
    quirky = [row["answer"] for row in rows if row["answer"] != row["answer"].strip()]
    assert quirky == ["George VI\n"]
    assert exact_match("George VI", quirky) == 1.0
    assert f1_precision_recall("George VI", quirky[0]) == (1.0, 1.0, 1.0)
    assert cover_exact_match("It was George VI.", quirky) == 1.0


# MuSiQue dev rows 2hop__14095_15463 and 2hop__88632_67668: `answer_aliases` join `answer`
# as extra golden answers, and every metric takes its max over them.
HEWLETT = ["Hewlett Packard", "Hewlett-Packard"]
NIGHTWING = ["Nightwing / Dick Grayson", "Nightwing", "Dick Grayson", "Batman", "Robin"]


@pytest.mark.parametrize(
    ("metric", "prediction", "golden", "expected"),
    [
        (exact_match, "Hewlett-Packard", HEWLETT[:1], 0.0),
        (exact_match, "Hewlett-Packard", HEWLETT, 1.0),
        (exact_match, "Robin", NIGHTWING[:1], 0.0),
        (exact_match, "Robin", NIGHTWING, 1.0),
        (f1_score, "Nightwing", NIGHTWING[:1], 0.5),
        (f1_score, "Nightwing", NIGHTWING, 1.0),
        (cover_exact_match, "He became Batman.", NIGHTWING[:1], 0.0),
        (cover_exact_match, "He became Batman.", NIGHTWING, 1.0),
    ],
)
def test_musique_aliases_are_extra_golden_answers(metric, prediction, golden, expected):
    assert metric(prediction, golden) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("prediction", "em", "f1", "cover"),
    [
        # HotpotQA comparison row 5a8753d95542994846c1cd63 has the golden answer "yes".
        ("Yes", 1.0, 1.0, 1.0),
        ("yes, both did", 0.0, 0.0, 1.0),
        ("No", 0.0, 0.0, 0.0),
    ],
)
def test_hotpotqa_comparison_answers(prediction, em, f1, cover):
    assert exact_match(prediction, "yes") == em
    assert f1_score(prediction, "yes") == f1
    assert cover_exact_match(prediction, "yes") == cover


def test_docstring_examples_run():
    result = doctest.testmod(answer)
    assert result.attempted > 0
    assert result.failed == 0
