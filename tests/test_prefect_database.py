"""A new Prefect home starts from the migrated template (ragfactory/prefect_database.py)."""

from __future__ import annotations

import sqlite3
from importlib.metadata import version

import pytest

from ragfactory.prefect_database import DATABASE, seed_home, seed_new_home, template_path

pytestmark = pytest.mark.subprocess  # the template is migrated by a child process

# The last of Prefect 3.8.8's migrations for SQLite, as its own server leaves a new database.
HEAD = {"3.8.8": "a3b9c7d2e5f1"}


def _revision_and_tables(path) -> tuple[str, int]:
    with sqlite3.connect(path) as db:
        (revision,) = db.execute("select version_num from alembic_version").fetchone()
        (tables,) = db.execute("select count(*) from sqlite_master where type = 'table'").fetchone()
    return revision, tables


def test_the_first_home_makes_the_template_and_the_next_ones_copy_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGFACTORY_PREFECT_CACHE", str(tmp_path / "cache"))
    template = template_path()
    assert template == tmp_path / "cache" / f"{version('prefect')}.db"
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()

    assert seed_home(first)
    made = template.stat()
    assert seed_home(second)
    served = tmp_path / "served" / "home"  # a `ragfactory serve` home not made yet
    assert seed_new_home({"PREFECT_HOME": str(served)})
    assert template.stat().st_mtime_ns == made.st_mtime_ns and template.stat().st_ino == made.st_ino
    assert sorted(p.name for p in template.parent.iterdir()) == [template.name]  # no scratch left

    for home in (first, second, served):
        revision, tables = _revision_and_tables(home / DATABASE)
        assert revision == HEAD.get(version("prefect")), f"Prefect {version('prefect')}: add its last migration"
        assert tables == 36


def test_a_template_that_cannot_be_made_leaves_the_home_to_its_server(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("RAGFACTORY_PREFECT_CACHE", str(blocker / "prefect"))
    home = tmp_path / "home"
    home.mkdir()
    assert not seed_home(home)
    assert list(home.iterdir()) == []


def test_an_empty_cache_setting_turns_seeding_off(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGFACTORY_PREFECT_CACHE", " ")
    assert template_path() is None
    assert not seed_home(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_served_home_with_a_database_or_another_database_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGFACTORY_PREFECT_CACHE", str(tmp_path / "cache"))
    home = tmp_path / "home"
    home.mkdir()
    (home / DATABASE).write_bytes(b"a server's history")
    assert not seed_new_home({"PREFECT_HOME": str(home)})
    assert (home / DATABASE).read_bytes() == b"a server's history"

    elsewhere = tmp_path / "elsewhere"
    url = f"sqlite+aiosqlite:///{tmp_path / 'other.db'}"
    assert not seed_new_home({"PREFECT_HOME": str(elsewhere), "PREFECT_SERVER_DATABASE_CONNECTION_URL": url})
    assert not seed_new_home({"PREFECT_HOME": str(elsewhere), "PREFECT_API_DATABASE_CONNECTION_URL": url})
    assert not elsewhere.exists() and not (tmp_path / "cache").exists()
