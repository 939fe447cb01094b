"""The evaluation baselines' prompts: FlashRAG's."""

from __future__ import annotations

import pytest

from tests.prompts.templates import checked_template

PROMPTS = {  # name: (placeholders, a phrase from its source)
    "flashrag_direct": (set(), "based on your own knowledge. Only give me the answer"),
    "flashrag_rag": ({"reference"}, "The following are given documents.\n\n{reference}"),
}


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_prompts_load_with_their_placeholders(name):
    checked_template(name, *PROMPTS[name])
