"""Modules stay readable: at most 400 lines each, and no function over 40 lines.

The limits are the house's (a module is one idea, a function fits on a screen); the tests,
benchmarks and generated files are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ragfactory", "flows", "tasks", "warehouse", "schemas")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := p.read_text().count("\n")) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_is_over_40_lines():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert long == {}


def test_the_scan_sees_the_code():
    # a scan of an empty or wrong folder would pass the two tests above for nothing
    names = {str(p.relative_to(ROOT)) for p in _modules()}
    assert {
        "flows/build.py",
        "ragfactory/cli/__init__.py",
        "warehouse/store.py",
        "tasks/search/decex/expansion.py",
    } <= names
