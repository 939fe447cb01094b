"""Prompt templates shipped as package data: one ``<name>.txt`` file per prompt.

The prompts several parts share (judges, the evaluation's baselines) are this package's files; a
strategy's own prompts and grammars sit in its folder (``tasks/search/<name>/prompts/``), beside
the code that sends them. Names are unique across those folders, and a prompt is found by name
wherever it sits (the name, not the folder, enters a grammar's call ids: ``Grammar.key``).

Templates are taken verbatim from the papers' appendices (docs/papers.md lists which). The
papers typeset them as HTML paragraphs; a file keeps each paragraph as a block separated by a
blank line, writes the ``<code>`` tag markup as the tags themselves (``<reasoning>``), keeps the
papers' ``**bold**`` markers as printed, and puts a ``### Heading``'s placeholder on the line
below it. Variable parts are ``{name}`` placeholders filled by ``render_prompt``.

>>> "{question}" in load_prompt("decex_sub_query")
True
"""

from __future__ import annotations

import string
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable

from ragfactory import plugins
from ragfactory.tasks.llm.grammar import GrammarError, render_grammar
from ragfactory.tasks.llm.types import Grammar

PACKAGE = "ragfactory.tasks.prompts"
# The package whose sub-packages (one per strategy) may hold a ``prompts/`` folder of their own.
STRATEGIES_PACKAGE = "ragfactory.tasks.search"


def prompt_folders() -> list[Traversable]:
    """This package's folder, every shipped strategy folder's ``prompts/`` (by folder name), then
    those plugged strategies registered (``ragfactory/plugins.py``) that are not among them."""
    shipped, known = _shipped_folders()
    return [*shipped, *(folder for folder in plugins.prompt_folders() if str(folder) not in known)]


@lru_cache(maxsize=1)
def _shipped_folders() -> tuple[tuple[Traversable, ...], frozenset[str]]:
    """The installed package's prompt folders, listed once per process: every prompt a build
    renders looks its name up, and listing the strategies' folders each time cost a directory
    check per strategy per prompt."""
    strategies = sorted(resources.files(STRATEGIES_PACKAGE).iterdir(), key=lambda p: p.name)
    shipped = (resources.files(PACKAGE), *(p / "prompts" for p in strategies if (p / "prompts").is_dir()))
    return shipped, frozenset(str(folder) for folder in shipped)


def prompt_files() -> dict[str, Traversable]:
    """Every prompt and grammar file by its name (``<name>.txt`` / ``<name>.lark``); a name in
    two folders is an error, since the name alone finds it."""
    return _files(tuple(prompt_folders()))


@lru_cache(maxsize=8)
def _files(folders: tuple[Traversable, ...]) -> dict[str, Traversable]:
    found: dict[str, Traversable] = {}
    for folder in folders:
        for path in folder.iterdir():
            if not path.name.endswith((".txt", ".lark")):
                continue
            if path.name in found:
                raise ValueError(f"prompt file {path.name!r} is in two folders: {found[path.name]} and {path}")
            found[path.name] = path
    return found


def _names(suffix: str) -> list[str]:
    return sorted(name[: -len(suffix)] for name in prompt_files() if name.endswith(suffix))


def load_prompt(name: str) -> str:
    """The template text of prompt ``name`` (the file ``<name>.txt``)."""
    source = prompt_files().get(f"{name}.txt")
    if source is None:
        raise KeyError(f"unknown prompt {name!r}; known prompts: {', '.join(_names('.txt'))}")
    return source.read_text(encoding="utf-8")


def prompt_fields(template: str) -> set[str]:
    """The placeholder names a template uses."""
    return {field for _, field, _, _ in string.Formatter().parse(template) if field}


def render_prompt(name: str, **values: str) -> str:
    """Prompt ``name`` with every placeholder filled; a missing or unknown value is an error.

    >>> render_prompt("decex_sub_query", question="Who wrote Dracula?").splitlines()[-3]
    'Who wrote Dracula?'
    """
    template = load_prompt(name)
    fields = prompt_fields(template)
    if set(values) != fields:
        raise ValueError(f"prompt {name!r} takes {sorted(fields)}; got {sorted(values)}")
    return template.format(**values)


def grammar_names() -> list[str]:
    """The prompts that ship an output grammar (``<name>.lark``)."""
    return _names(".lark")


@lru_cache(maxsize=256)
def load_grammar(name: str, max_tokens: int, field: str = "max_tokens", **params: object) -> Grammar:
    """The output grammar of prompt ``name`` for outputs of at most ``max_tokens`` tokens.

    Its free text gets what ``max_tokens`` leaves after the tags and bounded fields, so every
    output closes within it (``grammar.render_grammar``); ``params`` fill other placeholders.
    ``field`` names the setting ``max_tokens`` came from, for the error when it is too small.

    >>> grammar = load_grammar("decex_self_answer", 64)
    >>> grammar.max_tokens <= 64, "<answer>" in grammar.text
    (True, True)
    """
    source = prompt_files().get(f"{name}.lark")
    if source is None:
        raise KeyError(f"prompt {name!r} has no grammar; prompts with one: {', '.join(grammar_names())}")
    try:
        text, bound = render_grammar(source.read_text(encoding="utf-8"), max_tokens, **params)
    except GrammarError as exc:
        raise GrammarError(f"{field}={max_tokens}: grammar {name!r}: {exc}") from None
    return Grammar(name, text, bound)
