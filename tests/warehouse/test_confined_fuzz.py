"""Hundreds of generated statements against the confined query: none writes, none reads outside.

Each statement is built from a core (a write, a read of some path, a harmless select) inside a
wrapper (EXPLAIN, EXPLAIN ANALYZE, PREPARE, a CTE, a statement list) with comments, keyword case
and semicolons varied, from a fixed seed. Targets lie inside the root and in folders outside it
made by the test; a secret file outside the root, and a link to it inside, stand for everything
else on disk. Every statement goes through ``query``, the entry ``ragfactory sql`` uses, on one
confined connection (reusing it is what ``user_query(con=...)`` promises to be sound).
"""

from __future__ import annotations

import hashlib
import random
import re

import duckdb
import pytest

from ragfactory.warehouse.catalog import Refused, confined_connection, user_query
from ragfactory.warehouse.confined import close
from tests.warehouse.filled import fill

SEED = 20261123
N_STATEMENTS = 600

WRITES = [
    "copy (select 42 as pwned) to '{target}'",
    "copy questions to '{target}' (format parquet)",
    "copy (with c as (select 1 as x) select * from c) to '{target}' (use_tmp_file false)",
    "export database '{folder}'",
    "attach '{target}' as other",
    "create table t as select 1 as x",
    "insert into questions select * from questions",
    "drop view questions",
    "create or replace view questions as select 'x' as question_id",
    "set enable_external_access = true",
    "reset allowed_directories",
    "set disabled_filesystems = ''",
    "install httpfs",
    "load httpfs",
    "call checkpoint()",
    "pragma enable_profiling",
]
READERS = ["read_text", "read_blob", "read_csv", "read_json_auto", "glob", "sniff_csv", "read_parquet"]
SELECTS = [
    "select count(*) as n from questions",
    "select 'copy (select 1) to ''{target}''; drop table x' as s",
    "select * from strategy_summary",
    "from questions_per_dataset",
    "with w as (select 'insert into questions' as x) select * from w",
]
WRAPPERS = [
    "{core}",
    "{core};",
    "explain {core}",
    "explain analyze {core}",
    "EXPLAIN (FORMAT json) {core}",
    "prepare p as {core}",
    "select 1; {core}",
    "{core}; select 1",
    "/* lead */ {core}",
    "-- lead\n{core}",
    "explain /* between */ analyze\n{core}",
    "with w as (select 1 as k) {core}",
    "select * from ({core}) as sub",
    "explain analyze with w as (select 1 as k) {core}",
]


def _digest(folder) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _listing(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _recase(sql: str, rng: random.Random) -> str:
    """Change the case of everything outside string literals (paths keep theirs)."""
    parts = sql.split("'")
    change = rng.choice([str.upper, str.lower, str.swapcase, str.title])
    return "'".join(change(part) if i % 2 == 0 else part for i, part in enumerate(parts))


def _cores(paths: dict, rng: random.Random) -> tuple[str, bool]:
    """A core statement, and whether it touches the secret outside the root."""
    kind = rng.choice(["write", "read", "select"])
    target = rng.choice(paths["targets"])
    if kind == "write":
        core = rng.choice(WRITES).format(target=target, folder=rng.choice(paths["folders"]))
        source = rng.choice(paths["reads"] + [None])
        if source and core.startswith("copy (select 42"):
            core = core.replace("select 42 as pwned", f"select * from read_text({_argument(source)})")
        return core, paths["secret"] in core or (source in paths["secret_ways"] and source in core)
    if kind == "read":
        source = rng.choice(paths["reads"])
        reader = rng.choice(READERS + ["from"])
        if reader == "from" and "'" not in source:  # a path used as a table: a reader in disguise
            return f"select * from '{source}'", source in paths["secret_ways"]
        return f"select * from {rng.choice(READERS)}({_argument(source)})", source in paths["secret_ways"]
    return rng.choice(SELECTS).format(target=target), False


def _argument(source: str) -> str:
    """A path as SQL: quoted, unless it is already an expression that computes one."""
    return source if "'" in source else f"'{source}'"


def _statements(paths: dict) -> list[tuple[str, bool]]:
    rng = random.Random(SEED)
    found: dict[str, bool] = {}
    while len(found) < N_STATEMENTS:
        core, touches = _cores(paths, rng)
        sql = rng.choice(WRAPPERS).format(core=core)
        found[_recase(sql, rng) if rng.random() < 0.5 else sql] = touches
    return list(found.items())


@pytest.fixture
def setting(warehouse, tmp_path):
    fill(warehouse)
    outside = [tmp_path / "out-a", tmp_path / "out-b"]
    for folder in outside:
        folder.mkdir()
    secret_text = "SECRET-" + hashlib.sha256(str(SEED).encode()).hexdigest()[:16]
    secret = tmp_path / "private" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text(secret_text)
    (warehouse.root / "leak.txt").symlink_to(secret)
    root = warehouse.root
    secret_ways = [
        str(secret),
        "warehouse://leak.txt",
        "warehouse://../private/secret.txt",
        "'warehouse://' || '../private/' || 'secret.txt'",
        f"'{secret.parent}/' || 'secret.txt'",
        "warehouse://runs/../../private/secret.txt",
    ]
    paths = {
        "secret": str(secret),
        "secret_ways": secret_ways,
        "targets": [
            f"{outside[0]}/x.csv",
            f"{outside[1]}/y.parquet",
            "warehouse://fuzz.csv",
            "warehouse://runs/run_id=r1/shard0.parquet",
            f"{root}/fuzz.csv",
            f"{root}/runs/run_id=r1/shard0.parquet",
            str(secret),
        ],
        "folders": [str(outside[0] / "dump"), "warehouse://dump", f"{root}/dump"],
        "reads": [
            "warehouse://questions/*/*.parquet",
            "warehouse://runs/**",
            "warehouse://leak.txt",
            f"{root}/runs/run_id=r1/shard0.parquet",
            *secret_ways,
        ],
    }
    return warehouse, outside, secret_text, paths


def test_no_generated_statement_writes_or_reads_outside_the_root(setting):
    warehouse, outside, secret_text, paths = setting
    statements = _statements(paths)
    before = (_digest(warehouse.root), [_listing(folder) for folder in outside])
    outcomes = {"refused": 0, "answered": 0, "failed": 0}
    con = confined_connection(warehouse)
    try:
        for sql, touches_secret in statements:
            outcome = _run(warehouse, con, sql, secret_text)
            assert not (touches_secret and outcome != "refused"), f"{outcome}, not refused: {sql}"
            outcomes[outcome] += 1
    finally:
        close(con)
    assert (_digest(warehouse.root), [_listing(folder) for folder in outside]) == before
    assert len(statements) >= 500
    # the generator reaches all three outcomes, so the checks above are not vacuous
    assert outcomes["refused"] > 300 and outcomes["answered"] > 30 and outcomes["failed"] < 100, outcomes


def _run(warehouse, con, sql: str, secret_text: str) -> str:
    try:
        result = user_query(warehouse, sql, con=con)
    except Refused as exc:
        assert secret_text not in str(exc), sql
        assert re.match(r"^refused: \S", str(exc)), str(exc)
        return "refused"
    except (duckdb.Error, ValueError) as exc:
        assert secret_text not in str(exc), sql
        return "failed"
    assert secret_text not in str(result.to_pylist()), sql
    return "answered"
