"""Prompt templates load as package data and render only with exactly their placeholders."""

from __future__ import annotations

import pytest

from ragfactory.tasks.prompts.loader import load_prompt, render_prompt
from tests.prompts.templates import checked_template

DECEX_PROMPTS = {  # name: (placeholders, a phrase from its table in DecEx-RAG, Appendix A.1)
    "decex_termination": ({"question", "iter_history"}, "whether there is sufficient evidence"),
    "decex_sub_question": ({"question"}, "output the next sub-question that needs to be solved"),
    "decex_self_answer": ({"question"}, "Which country's capital is Beijing?"),
    "decex_sub_query": ({"question"}, "Generate the query directly"),
    "decex_rollout": ({"question", "iter_history"}, "call a search engine by <search> query </search>"),
}


@pytest.mark.parametrize("name", sorted(DECEX_PROMPTS))
def test_decex_prompts_load_with_their_placeholders(name):
    template = checked_template(name, *DECEX_PROMPTS[name])
    assert template.rstrip().endswith("### Your Output")


def test_render_fills_values_literally():
    text = render_prompt("decex_rollout", question="Is {x} a set?", iter_history="None")
    assert "### Question\nIs {x} a set?\n\n### Previous Iteration\nNone\n\n### Your Output" in text


@pytest.mark.parametrize("values", [{}, {"question": "q"}, {"question": "q", "iter_history": "h", "x": "1"}])
def test_render_refuses_missing_or_unknown_values(values):
    with pytest.raises(ValueError, match="decex_termination"):
        render_prompt("decex_termination", **values)


def test_unknown_prompt_lists_the_known_ones():
    with pytest.raises(KeyError, match="decex_rollout"):
        load_prompt("no_such_prompt")
