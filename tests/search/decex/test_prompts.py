"""DecEx-RAG's prompt templates (Appendix A.1) load with exactly their placeholders."""

from __future__ import annotations

import pytest

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
