"""Queries live in ``.sql`` files beside the code that runs them (``warehouse/sql_files.py``), not
in string literals: no product module holds a multi-line SQL string, and every ``.sql`` file ships
as package data."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("ragfactory", "flows", "tasks", "warehouse", "schemas")
# a line that opens an SQL clause: what a query written across lines has and prose does not
CLAUSE = re.compile(
    r"^\s*(select|with|from|where|group by|order by|union|join|qualify|insert into|create|copy|update|delete)\b"
    r"|^\s*\w+ as \($",
    re.IGNORECASE | re.MULTILINE,
)


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    found = set()
    for node in ast.walk(tree):
        first = node.body[0] if isinstance(node, kinds) and node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def _text(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's literal parts, joined."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    return None


def sql_literals(source: str) -> list[int]:
    """Line numbers of the string literals in ``source`` (docstrings aside) that hold SQL over
    more than one line."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    lines = []
    for node in ast.walk(tree):
        text = _text(node)
        if text is None or id(node) in docstrings or "\n" not in text.strip():
            continue
        if CLAUSE.search(text):
            lines.append(node.lineno)
    return sorted(set(lines))


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def test_no_multi_line_sql_string_in_product_code():
    found = {
        f"{path.relative_to(REPO)}:{line}"
        for path in _modules()
        for line in sql_literals(path.read_text(encoding="utf-8"))
    }
    assert sorted(found) == []


def test_the_scan_catches_a_query_and_spares_prose():
    source = '''
"""A module that says: select the rows
from the table."""
QUERY = """
select a from t
where b = $b
"""
PART = f"""
counts as (
    {"x"}
)"""
MESSAGE = "no run named that; list them with\\n`ragfactory sql`"
ONE_LINE = "select a from t " "where b = $b"
'''
    assert sql_literals(source) == [4, 8]


def _shipped() -> set[Path]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {package: REPO / folder for package, folder in config["package-dir"].items()}
    shipped = set()
    for package, globs in config["package-data"].items():
        top = max((p for p in folders if package == p or package.startswith(p + ".")), key=len)
        base = folders[top].joinpath(*package[len(top) :].split(".")[1:])
        shipped |= {path for glob in globs for path in base.glob(glob)}
    return shipped


def test_every_sql_file_ships_as_package_data():
    files = {p for package in PACKAGES for p in (REPO / package).rglob("*.sql")}
    assert len(files) > 40
    assert sorted(str(p.relative_to(REPO)) for p in files - _shipped()) == []
