"""SQL kept in files beside the code that runs it.

A module's queries are ``.sql`` files in its package's ``sql/`` folder (the warehouse's own
views are ``warehouse/sql/``; its other queries are ``warehouse/queries/``), shipped as package
data (pyproject.toml), so no query is a string in the code and each reads as SQL on its own.
"""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def sql_file(package: str, name: str, folder: str = "sql") -> str:
    """The text of ``<folder>/<name>.sql`` in ``package`` (a dotted name, e.g.
    ``ragfactory.tasks``), without its leading and trailing blank space."""
    return (resources.files(package) / folder / f"{name}.sql").read_text(encoding="utf-8").strip()
