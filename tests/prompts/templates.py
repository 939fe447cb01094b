"""The check every prompt table runs: a template loads, has exactly its placeholders, carries a
phrase of its source and no HTML left over from the paper's extraction."""

from __future__ import annotations

from ragfactory.tasks.prompts.loader import load_prompt, prompt_fields


def checked_template(name: str, fields: set[str], phrase: str) -> str:
    """The template ``name``, after asserting its placeholders, its source phrase and no HTML."""
    template = load_prompt(name)
    assert prompt_fields(template) == fields
    assert phrase in template
    assert "<code>" not in template and "<p>" not in template
    return template
