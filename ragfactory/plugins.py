"""Names of plugged parts: a built-in name, or ``<plugin>:<name>`` for one registered at run time.

Engines (``tasks/llm/registry.py``) and retrievers (``tasks/retrieval/factory.py``) are looked up
by name; a config names either a built-in or a plugged one. This module imports nothing of ours,
so both parts share the one check without importing each other.
"""

from __future__ import annotations


def builtin_or_plugged(name: str, builtins: tuple[str, ...], field: str, what: str) -> str:
    """``name`` if it is one of ``builtins`` or has the plugged shape ``<plugin>:<name>``; else a
    ValueError naming the field, the value and the built-ins. Which plugged names exist is known
    only to the process's registry; the shape alone tells a plugged name from a misspelt built-in.
    """
    plugin, sep, rest = name.partition(":")
    if name in builtins or (sep and plugin and rest):
        return name
    raise ValueError(f"{field} {name!r} is neither a built-in {what} ({', '.join(builtins)}) "
                     "nor a registered one named '<plugin>:<name>'")
