"""A DuckDB connection that reads the warehouse and nothing else, and can write nowhere.

The second wall behind ``warehouse.guard``: whatever a statement is, the connection it runs on
has no local file system (``disabled_filesystems``), only the read-only ``warehouse://`` one of
``warehouse.readonly_fs``; external access is off with ``warehouse://`` as its only allowed
directory, so nothing on the network or elsewhere on disk is reachable; extensions are neither
installed nor loaded at query time; nothing spills to a temporary directory; and the
configuration is locked last, so no SET, RESET or PRAGMA can widen any of it.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from ragfactory.warehouse.guard import ReadRefused, Refused, WriteRefused
from ragfactory.warehouse.readonly_fs import PREFIX, PROTOCOL, WarehouseFileSystem

# Applied in this order: allowed_directories can only be set while external access is on, and
# turning external access off must come before the local file system goes away.
SETTINGS = (
    ("autoinstall_known_extensions", False),
    ("autoload_known_extensions", False),
    ("allow_community_extensions", False),
    ("allow_unsigned_extensions", False),
    ("allow_extension_repositories", "forbidden"),
    ("allow_persistent_secrets", False),
    ("python_enable_replacements", False),  # no scanning of Python variables by name
    ("temp_directory", ""),  # no spill files: a query that outgrows memory fails instead
    ("allowed_directories", [PREFIX]),
    ("enable_external_access", False),
    ("disabled_filesystems", "LocalFileSystem"),
    ("lock_configuration", True),
)

_NO_ACCESS = re.compile(r'Cannot access (?:file|directory) "([^"]*)"')
_PY_REFUSAL = re.compile(r"ReadOnlyError: (.*)")


def confined_duckdb(root: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory connection confined to ``root`` (read-only, as ``warehouse://``), locked."""
    con = duckdb.connect()
    try:
        con.register_filesystem(WarehouseFileSystem(root))
        for name, value in SETTINGS:
            con.execute(f"set {name} = $value", {"value": value})
    except BaseException:
        close(con)
        raise
    return con


def close(con: duckdb.DuckDBPyConnection) -> None:
    """Close a confined connection, letting go of its Python file system first."""
    try:
        if con.filesystem_is_registered(PROTOCOL):
            con.unregister_filesystem(PROTOCOL)
    except duckdb.Error:
        pass  # already closed
    con.close()


def refusal(exc: duckdb.Error) -> Refused | None:
    """The refusal a DuckDB error stands for, when the connection's confinement stopped a query."""
    text = str(exc)
    found = _PY_REFUSAL.search(text)
    if found:
        return ReadRefused(f"refused: {found.group(1).strip()}")
    if not isinstance(exc, duckdb.PermissionException):
        return None
    found = _NO_ACCESS.search(text)
    if found:
        return ReadRefused(f"refused: {found.group(1)} is outside the warehouse; only {PREFIX} paths are readable here")
    if "LocalFileSystem has been disabled" in text:
        return ReadRefused(f"refused: a local file path; only {PREFIX} paths are readable here")
    if "extension" in text.lower():
        return WriteRefused(f"refused: extensions are neither installed nor loaded here ({text.splitlines()[0]})")
    return ReadRefused(f"refused: {text.splitlines()[0]}")
