"""The scrambled control of benchmarks/learning.py: labels rotated among questions of the same
kind, worked by hand. No model, no warehouse."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "learning_controls.py"
_spec = importlib.util.spec_from_file_location("learning_controls", SCRIPT)
learning_controls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(learning_controls)


def test_labels_rotate_among_questions_of_the_same_kind_and_steps():
    """q1 to q3 ask a birth year: each takes the next one's year (q3 the first's). q4 (a city) and
    q5 (a company) are alone in their kinds: they swap, crossing kinds. q6 is the only two-step
    question: it keeps its own labels. So 3 of 6 questions did not take a label of their kind."""
    labels = {
        "q1": ["1901"],
        "q2": ["1902"],
        "q3": ["1903"],
        "q4": ["Orvath"],
        "q5": ["Belquaeth Ltd"],
        "q6": ["Ulm", "1950"],
    }
    kinds = {"q1": '["born"]', "q2": '["born"]', "q3": '["born"]', "q4": '["city"]', "q5": '["employer"]'}
    kinds["q6"] = '["city", "founded"]'
    rotated, crossed = learning_controls.rotated_labels(labels, kinds)
    assert rotated == {
        "q1": ["1902"],
        "q2": ["1903"],
        "q3": ["1901"],
        "q4": ["Belquaeth Ltd"],
        "q5": ["Orvath"],
        "q6": ["Ulm", "1950"],
    }
    assert crossed == 3


def test_a_question_without_a_kind_rotates_with_the_others_that_lack_one():
    labels = {"a": ["x"], "b": ["y"], "c": ["z"]}
    rotated, crossed = learning_controls.rotated_labels(labels, {})
    assert rotated == {"a": ["y"], "b": ["z"], "c": ["x"]} and crossed == 0
