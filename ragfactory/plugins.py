"""Names of plugged parts: a built-in name, or ``<plugin>:<name>`` for one registered at run time.

Engines (``tasks/llm/registry.py``) and retrievers (``tasks/retrieval/factory.py``) are looked up
by name; a config names either a built-in or a plugged one. This module imports nothing of ours,
so both parts share the one check without importing each other.

It also holds the folders of SQL views and of prompts that plugged parts ship: a search strategy
registers its ``views/`` folder here (``tasks/search/strategy.py``) and the warehouse catalog reads
them (``warehouse/catalog.py``), so neither part imports the other; likewise its ``prompts/``
folder, which the prompt loader reads (``tasks/prompts/loader.py``).
"""

from __future__ import annotations

from pathlib import Path

_VIEW_FOLDERS: dict[str, Path] = {}
_PROMPT_FOLDERS: dict[str, Path] = {}


def builtin_or_plugged(name: str, builtins: tuple[str, ...], field: str, what: str) -> str:
    """``name`` if it is one of ``builtins`` or has the plugged shape ``<plugin>:<name>``; else a
    ValueError naming the field, the value and the built-ins. Which plugged names exist is known
    only to the process's registry; the shape alone tells a plugged name from a misspelt built-in.
    """
    plugin, sep, rest = name.partition(":")
    if name in builtins or (sep and plugin and rest):
        return name
    raise ValueError(
        f"{field} {name!r} is neither a built-in {what} ({', '.join(builtins)}) "
        "nor a registered one named '<plugin>:<name>'"
    )


def register_views(owner: str, folder: Path) -> None:
    """Show the ``*.sql`` views of ``folder`` in the catalog, on behalf of ``owner``."""
    _VIEW_FOLDERS[owner] = Path(folder)


def unregister_views(owner: str) -> None:
    _VIEW_FOLDERS.pop(owner, None)


def view_folders() -> list[Path]:
    """The registered view folders, in registration order."""
    return list(_VIEW_FOLDERS.values())


def register_prompts(owner: str, folder: Path) -> None:
    """Let the prompt loader find the templates and grammars of ``folder``, on behalf of ``owner``."""
    _PROMPT_FOLDERS[owner] = Path(folder)


def unregister_prompts(owner: str) -> None:
    _PROMPT_FOLDERS.pop(owner, None)


def prompt_folders() -> list[Path]:
    """The registered prompt folders, in registration order."""
    return list(_PROMPT_FOLDERS.values())
