"""A DuckDB connection that reads the warehouse and nothing else, and can write nowhere.

The second wall behind ``warehouse.guard``: whatever a statement is, the connection it runs on
has no local file system (``disabled_filesystems``), only the read-only ``warehouse://`` one of
``warehouse.readonly_fs``; external access is off with ``warehouse://`` as its only allowed
directory, so nothing on the network or elsewhere on disk is reachable; extensions are neither
installed nor loaded at query time; nothing spills to a temporary directory; and the
configuration is locked last, so no SET, RESET or PRAGMA can widen any of it.

A person's query is also bounded (``SqlLimits``), so that one statement (a cross join of
``nodes`` with itself four times, sorted at random) cannot take the machine others work on: a
memory limit on the connection (a modest share of RAM; nothing spills, so a query that outgrows
it fails), a time limit (a timer thread interrupts the connection), and, on the dashboard, a
row limit. Each ends the query with ``LimitReached``: one line naming the limit and how to raise it.
"""

from __future__ import annotations

import math
import os
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import psutil

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

MEMORY_ENV, TIMEOUT_ENV, ROWS_ENV = "RAGFACTORY_SQL_MEMORY_LIMIT", "RAGFACTORY_SQL_TIMEOUT_S", "RAGFACTORY_SQL_MAX_ROWS"
_GIB = 1 << 30
# DuckDB's memory units; it reads a negative size as 16,384 PiB and fails to plan below a few MiB
_UNITS = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*")
MIN_MEMORY = 64 << 20
MAX_TIMEOUT_S = 86_400.0  # a day: a longer analysis has `duckdb -readonly`


def default_memory_limit() -> str:
    """An eighth of this machine's RAM, between 1 and 4 GiB: room for any sane query over the
    warehouse, while a runaway one leaves the builds and people sharing the machine alone."""
    share = min(max(psutil.virtual_memory().total // 8, _GIB), 4 * _GIB)
    return f"{share / _GIB:.1f}GiB"


@dataclass(frozen=True)
class SqlLimits:
    """What one person's query may take; ``from_env`` reads the ``RAGFACTORY_SQL_*`` overrides."""

    memory_limit: str = field(default_factory=default_memory_limit)  # DuckDB's memory_limit
    # A question over the warehouse answers in seconds; a longer analysis has `duckdb -readonly`.
    timeout_s: float = 120.0
    # None: every row (`ragfactory sql`); the dashboard holds a result in memory to render it.
    max_rows: int | None = None
    flags: bool = True  # whether the surface running the query takes --memory-limit / --timeout

    @classmethod
    def from_env(cls, defaults: dict | None = None, **overrides) -> SqlLimits:
        """The limits: ``defaults`` (a surface's own), then the environment's, then ``overrides``
        (a command's options; None is unset). A value from the environment or an option out of
        its range is ``LimitOutOfRange``, naming the variable or the option."""
        found: dict = dict(defaults or {})
        for name, env, check in _ENTRIES:
            if os.environ.get(env):
                found[name] = check(os.environ[env], f"${env}")
        given = {k: v for k, v in overrides.items() if v is not None}
        for name, flag, check in _FLAGS:
            if name in given:
                given[name] = check(given[name], flag)
        return replace(cls(), **(found | given))


class LimitOutOfRange(Refused):
    """A limit given outside its range; the message names the flag or variable it came from and
    the range, since an unchecked one could mean no limit at all (a negative memory size, a
    timeout of 0, nan or inf)."""


def checked_memory(value: str, source: str) -> str:
    """``value`` (``source``'s text), a DuckDB memory size from ``MIN_MEMORY`` to this machine's RAM."""
    ram = psutil.virtual_memory().total
    found = _SIZE.fullmatch(value)
    unit = _UNITS.get(found.group(2).lower()) if found else None
    if unit is None or not MIN_MEMORY <= float(found.group(1)) * unit <= ram:
        raise LimitOutOfRange(
            f"{source}={value}: a memory limit is a size in KB, MB, GB, TB, KiB, MiB, GiB or TiB from "
            f"{MIN_MEMORY >> 20}MiB to {math.floor(ram / _GIB * 10) / 10:.1f}GiB (this machine's RAM)"
        )
    return value.strip()


def checked_timeout(value: str | float, source: str) -> float:
    """``value`` as seconds from 0.1 to ``MAX_TIMEOUT_S``; nan, inf and anything below are refused."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0.1 <= seconds <= MAX_TIMEOUT_S):
        shown = f"{value:g}" if isinstance(value, float) else value
        raise LimitOutOfRange(
            f"{source}={shown}: a time limit is a number of seconds from 0.1 to {MAX_TIMEOUT_S:g} (a day)"
        )
    return seconds


def checked_rows(value: str | int, source: str) -> int:
    """``value`` as a row count of at least 1."""
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise LimitOutOfRange(f"{source}={value}: a row limit is a whole number from 1 up")
    return int(text)


_ENTRIES = (("memory_limit", MEMORY_ENV, checked_memory), ("timeout_s", TIMEOUT_ENV, checked_timeout))
_ENTRIES += (("max_rows", ROWS_ENV, checked_rows),)
_FLAGS = (("memory_limit", "--memory-limit", checked_memory), ("timeout_s", "--timeout", checked_timeout))


class LimitReached(Refused):
    """A query stopped by one of its ``SqlLimits``; the message names the limit and how to raise it."""


def _raise_with(limits: SqlLimits, flag: str, env: str) -> str:
    return f"raise it with {flag} or ${env}" if limits.flags else f"raise it with ${env} where this server starts"


def memory_refusal(limits: SqlLimits) -> LimitReached:
    return LimitReached(
        f"query stopped: it needs more than its {limits.memory_limit} memory limit "
        f"({_raise_with(limits, '--memory-limit', MEMORY_ENV)}; nothing spills to disk)"
    )


def time_refusal(limits: SqlLimits) -> LimitReached:
    return LimitReached(
        f"query stopped: it ran past its {limits.timeout_s:g} s time limit "
        f"({_raise_with(limits, '--timeout', TIMEOUT_ENV)})"
    )


def rows_refusal(limits: SqlLimits) -> LimitReached:
    return LimitReached(
        f"query stopped: its result has more than {limits.max_rows:,} rows, the row limit "
        f"here (add a LIMIT, use `ragfactory sql`, or raise it with ${ROWS_ENV} where this server starts)"
    )


@contextmanager
def within_limits(con: duckdb.DuckDBPyConnection, limits: SqlLimits):
    """Interrupt ``con`` once ``limits.timeout_s`` has passed; the interruption, or running out
    of the memory limit, ends the block with ``LimitReached``."""
    fired = threading.Event()

    def interrupt() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(limits.timeout_s, interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    except duckdb.Error as exc:
        if fired.is_set():
            raise time_refusal(limits) from exc
        if isinstance(exc, duckdb.OutOfMemoryException):
            raise memory_refusal(limits) from exc
        raise
    finally:
        timer.cancel()


_NO_ACCESS = re.compile(r'Cannot access (?:file|directory) "([^"]*)"')
_PY_REFUSAL = re.compile(r"ReadOnlyError: (.*)")


def confined_duckdb(root: str | Path, limits: SqlLimits | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection confined to ``root`` (read-only, as ``warehouse://``), within
    ``limits``' memory (default ``SqlLimits.from_env()``), locked."""
    limits = limits or SqlLimits.from_env()
    con = duckdb.connect()
    try:
        con.register_filesystem(WarehouseFileSystem(root))
        con.execute("set memory_limit = $value", {"value": limits.memory_limit})
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
