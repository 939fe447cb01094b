"""The Fig. 14 process judge's verdicts, read as the paper's own examples write them."""

from __future__ import annotations

import pytest

from ragfactory.tasks.search.mcts.judge import parse_verdict


@pytest.mark.parametrize(
    ("text", "score"),
    [
        # ReasonRAG Fig. 8, the partially correct process
        ("While the evidence retrieved is correct ... it is insufficient\n\nSo the score is 15.", 0.15),
        # ReasonRAG Fig. 10, the correct process, in bold
        ("Despite these imperfections, the agent correctly disambiguates the films.\n\nSo the score is **88**.", 0.88),
        # the scale the Fig. 14 prompt asks for
        ("So the score is 0.88", 0.88),
        ("So the score is [0.3].", 0.3),
        ("so the score is 1", 1.0),
        ("So the score is 0", 0.0),
        ("So the score is 72%", 0.72),
        # the last verdict counts when the judge revises itself
        ("So the score is 0.9. On reflection, too lenient. So the score is 0.4.", 0.4),
    ],
)
def test_verdicts(text, score):
    assert parse_verdict(text) == pytest.approx(score)


@pytest.mark.parametrize(
    "text",
    [
        "The reasoning is flawed.",  # no verdict line
        "So the score is high.",  # no number
        "So the score is 150.",  # beyond any scale
        "So the score is -0.2",  # negative
        "",
    ],
)
def test_malformed_verdicts_are_none(text):
    assert parse_verdict(text) is None


def test_the_process_judge_prompt_is_figure_14():
    from tests.prompts.templates import checked_template

    checked_template("reasonrag_process_judge", set(), "conclude with: So the score is [Score].")
