"""Rules of the test suite itself (docs/testing.md): what one test module shares with another lives
in a helper module or a ``conftest.py``, never in another test module, so a test file can be
moved, run alone or run on another xdist worker without dragging a second file's tests along."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imports_of_test_modules(path: Path) -> list[str]:
    """The ``tests.…test_*`` modules that ``path`` imports, at any depth of the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found += [
            n for n in names if n.startswith("tests.") and any(part.startswith("test_") for part in n.split(".")[1:])
        ]
    return sorted(set(found))


def test_no_test_module_imports_another():
    offenders = {str(p.relative_to(TESTS)): imports_of_test_modules(p) for p in sorted(TESTS.rglob("*.py"))}
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_check_sees_a_nested_import_of_a_test_module(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text("def test_y():\n    from tests.flows.test_build import helper\n    import tests.fakes\n")
    assert imports_of_test_modules(path) == ["tests.flows.test_build", "tests.flows.test_build.helper"]


def test_a_module_is_one_xdist_scope_and_the_e2e_package_is_one():
    from tests.conftest import xdist_scope

    assert xdist_scope("tests/flows/test_build.py::test_a[decex]") == "tests/flows/test_build.py"
    assert (
        xdist_scope("tests/e2e/test_stack.py::test_a")
        == xdist_scope("tests/e2e/test_stack_flywheel.py::t")
        == ("tests/e2e/")
    )


def test_every_longest_scope_names_a_module_or_package_of_the_suite():
    from tests.conftest import LONGEST_SCOPES

    root = TESTS.parent
    assert [scope for scope in LONGEST_SCOPES if not (root / scope).exists()] == []
    assert len(set(LONGEST_SCOPES)) == len(LONGEST_SCOPES)
