"""Prompt templates load as package data and render only with exactly their placeholders."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ragfactory.tasks.prompts.loader import load_prompt, prompt_files, render_prompt


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


def test_every_prompt_and_grammar_file_ships_as_package_data():
    """Each file the loader finds, shared or in a strategy's folder, matches a package-data glob
    of pyproject.toml (so an installed wheel has it)."""
    repo = Path(__file__).resolve().parents[2]
    package_data = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {
        path
        for package, globs in package_data.items()
        for glob in globs
        for path in (repo / Path(*package.split(".")[1:])).glob(glob)
    }
    files = {Path(str(p)) for p in prompt_files().values()}
    assert len(files) > 40 and any("search" in p.parts for p in files)
    assert sorted(str(p) for p in files - shipped) == []
