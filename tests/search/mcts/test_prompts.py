"""ReasonRAG's prompts: Figures 12 and 13 (Appendix F), the Reasoning and Grounding stages."""

from __future__ import annotations

import pytest

from ragfactory.tasks.prompts.loader import render_prompt
from tests.prompts.templates import checked_template

PROMPTS = {  # name: (placeholders, a phrase from its source)
    "reasonrag_reasoning": ({"answer_format"}, "Avoid repeating previous queries."),
    "reasonrag_grounding": (set(), "output: <evidence>None</evidence>."),
}


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_prompts_load_with_their_placeholders(name):
    checked_template(name, *PROMPTS[name])


def test_the_reasoning_prompt_names_both_conclusions():
    text = render_prompt("reasonrag_reasoning", answer_format="answer")
    assert 'If generating an answer: "So the answer is <answer>answer</answer>".' in text
    assert 'If more retrieval is needed: "So the next query is <query>query</query>".' in text
    for rule in ("Error Reflection", "Information Sufficiency", "Conciseness", "Conclusion"):
        assert f"* {rule}:" in text
