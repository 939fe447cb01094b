"""MCTS config: the documented defaults and the errors that name the field."""

from __future__ import annotations

import pytest

from ragfactory.tasks.search.mcts.config import MctsConfig
from ragfactory.tasks.search.mcts.uct import UctSettings


def test_defaults_follow_the_authors_code_where_the_paper_is_silent():
    config = MctsConfig()
    assert (config.c, config.child_limit, config.max_depth, config.alpha, config.top_k) == (1.414, 2, 7, 0.95, 3)
    assert config.uct() == UctSettings(c=1.414, child_limit=2, max_depth=7, log_visits=False)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("iterations", 0, "MctsConfig.iterations must be >= 1, got 0"),
        ("alpha", 1.5, r"MctsConfig.alpha must be in \(0, 1\], got 1.5"),
        ("c", -1.0, "MctsConfig.c must be >= 0, got -1.0"),
        ("value", "oracle", "MctsConfig.value must be one of"),
    ],
)
def test_bad_values_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        MctsConfig(**{field: value})
