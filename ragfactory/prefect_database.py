"""A new Prefect home starts from a migrated database.

Each command gets a Prefect home of its own (``local_flows.prefect_local_defaults``), so the
temporary API server Prefect starts for it would create an empty SQLite database and run every
one of Prefect's migrations on it before answering: on two cores that is about 4 s of the
server's 7 s start, in every command and every test session. The migrations depend only on
Prefect's release, so they run once per release into a template in the user's cache
(``$RAGFACTORY_PREFECT_CACHE/<release>.db``, by default ``~/.cache/ragfactory/prefect``, or under
``$XDG_CACHE_HOME``; an empty ``$RAGFACTORY_PREFECT_CACHE`` turns this off), and each new home
starts from a copy of it: the server finds its database at the latest revision and only checks
it (about 3.5 s to start).

A ``ragfactory serve`` whose home holds no database yet (a new machine, a test's stack) starts
from a copy too (``seed_new_home``); a home that has one keeps it, history and all.

The template is made in a child process, so a command never imports Prefect's server; it is
written under a temporary name and renamed into place, so commands that make it at once each
see a whole file or none. SQLite's backup API copies it, never a file copy that could catch a
write half done.

What it cannot do: a template is named by Prefect's release alone, so a Prefect installed from
an unreleased tree (one version, changing migrations) would need the cache cleared; and when the
template cannot be made or copied (a read-only cache, a full disk), the home is left empty and
the server migrates it as before, slower and otherwise the same.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

logger = logging.getLogger(__name__)

CACHE_ENV = "RAGFACTORY_PREFECT_CACHE"
DATABASE = "prefect.db"  # Prefect's default: sqlite+aiosqlite:///$PREFECT_HOME/prefect.db
_MIGRATE = "import asyncio; from prefect.server.database import provide_database_interface as db; asyncio.run(db().create_db())"


def template_path() -> Path | None:
    """Where the migrated database of the installed Prefect release is kept; None when
    ``$RAGFACTORY_PREFECT_CACHE`` is empty."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None and not configured.strip():
        return None
    default = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "ragfactory" / "prefect"
    return Path(configured or default).expanduser() / f"{version('prefect')}.db"


def seed_home(home: Path) -> bool:
    """Copy the migrated template into the new Prefect ``home`` (made first if missing); whether
    it did. Never raises: a home left empty is migrated by the server, as without this."""
    try:
        if (template := template_path()) is None:
            return False
        if not template.exists():
            make_template(template)
        _copy(template, home / DATABASE)
        return True
    except (OSError, sqlite3.Error, subprocess.SubprocessError, PackageNotFoundError) as exc:
        logger.debug("Prefect's database in %s is made by its server: %s", home, exc)
        (home / DATABASE).unlink(missing_ok=True)
        return False


def seed_new_home(env: Mapping[str, str]) -> bool:
    """Seed the Prefect home of a server started with ``env`` (``PREFECT_HOME``, else
    ``~/.prefect``) when it holds no database yet and ``env`` names no other; whether it did. A
    database already there, with its history, is never touched."""
    if any(env.get(f"PREFECT_{part}_DATABASE_CONNECTION_URL") for part in ("SERVER", "API")):
        return False
    home = Path(env.get("PREFECT_HOME") or "~/.prefect").expanduser()
    if (home / DATABASE).exists():
        return False
    home.mkdir(parents=True, exist_ok=True)
    return seed_home(home)


def make_template(template: Path) -> None:
    """Run Prefect's migrations on a new database at ``template``, in a child process."""
    template.parent.mkdir(parents=True, exist_ok=True)
    partial = template.with_name(f".{template.name}.{os.getpid()}")
    scratch = template.with_name(f".home-{os.getpid()}")
    scratch.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PREFECT_HOME": str(scratch),
        "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{partial}",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    try:
        subprocess.run([sys.executable, "-c", _MIGRATE], env=env, check=True, capture_output=True, timeout=600)
        _settle(partial)
        os.replace(partial, template)
    finally:
        for leftover in (partial, *(partial.with_name(partial.name + end) for end in ("-wal", "-shm"))):
            leftover.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)


def _settle(database: Path) -> None:
    """Fold a write-ahead log the migrations left into the file itself, so the file alone is the
    whole database, and check that they ran: an error if no revision is recorded."""
    db = sqlite3.connect(database)
    try:
        db.execute("pragma wal_checkpoint(truncate)")
        if db.execute("select version_num from alembic_version").fetchone() is None:
            raise sqlite3.DatabaseError(f"no migration recorded in {database}")
    finally:
        db.close()


def _copy(source: Path, target: Path) -> None:
    src, dst = sqlite3.connect(f"file:{source}?immutable=1", uri=True), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
