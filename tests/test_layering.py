"""Architecture rules of docs/architecture.md that code review alone would miss."""

from __future__ import annotations

import ast
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _python_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.py") if ".venv" not in p.parts]


def installed_layout(dest: Path) -> Path:
    """The sources laid out as the wheel installs them (``tests/../pyproject.toml`` package-dir:
    ``tasks/`` becomes ``ragfactory/tasks/``), so that import-linter, which walks a package's
    folder, sees every module; returns ``dest``."""
    package_dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in package_dirs.items():
        target = dest.joinpath(*package.split("."))
        for path in _python_files(REPO / folder):
            out = target / path.relative_to(REPO / folder)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
    return dest


def lint_imports(layout: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with the contracts of pyproject.toml over ``layout``."""
    command = [str(Path(sys.executable).with_name("lint-imports")), str(REPO / "pyproject.toml"), "--no-cache"]
    env = {**os.environ, "PYTHONPATH": str(layout)}
    return subprocess.run(command, cwd=layout, env=env, capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold(tmp_path):
    result = lint_imports(installed_layout(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 6 kept, 0 broken." in result.stdout


def test_the_import_contracts_catch_a_forbidden_import(tmp_path):
    layout = installed_layout(tmp_path)
    (layout / "ragfactory/tasks/search/tree.py").write_text("def f():\n    from ragfactory.warehouse import store\n")
    (layout / "ragfactory/schemas/tables.py").write_text("import prefect\n")
    result = lint_imports(layout)
    assert result.returncode == 1
    assert "Contracts: 4 kept, 2 broken." in result.stdout
    assert "ragfactory.tasks.search.tree -> ragfactory.warehouse.store" in result.stdout
    assert "ragfactory.schemas.tables -> prefect" in result.stdout


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = config["package-dir"]
    listed = set(config["packages"])
    for package, folder in mapping.items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder)
            name = ".".join([package, *relative.parts])
            assert name in listed, f"{name} ({init.parent}) is missing from pyproject packages"


# --- Parts (docs/architecture.md) and the arrows between them ---------------------------------

# A project module's part is that of its longest prefix here; the top-level task wrappers
# (tasks/*.py) are "Tasks", and ragfactory/*.py (serve, progress, output) and the command line
# (ragfactory/cli/) are "CLI".
PARTS = {
    "ragfactory": "CLI",
    "ragfactory.cli": "CLI",
    # progress bars that tasks draw too; a leaf that imports nothing of ours
    "ragfactory.progress": "Common",
    # the built-in-or-plugged name check that engine and retriever configs share
    "ragfactory.plugins": "Common",
    # write to a temporary sibling, then rename into place: the warehouse and the tasks share it
    "ragfactory.atomic": "Common",
    # the allocator's settings and the peak resident memory: engines and commands share them
    "ragfactory.memory": "Common",
    "ragfactory.data": "Data",
    "ragfactory.schemas": "Schemas",
    "ragfactory.warehouse": "Warehouse",
    "ragfactory.flows": "Flows",
    # the flows' parameter models: task wrappers receive them, so they form a part of their own
    # below Flows (flows/config.py imports no flow)
    "ragfactory.flows.config": "Flow parameters",
    "ragfactory.flows.config_hash": "Flow parameters",
    "ragfactory.tasks": "Tasks",
    "ragfactory.tasks.llm": "LLM",
    "ragfactory.tasks.retrieval": "Retrieval",
    "ragfactory.tasks.search": "Search",
    "ragfactory.tasks.rewards": "Rewards",
    "ragfactory.tasks.valuation": "Valuation",
    "ragfactory.tasks.export": "Export",
    "ragfactory.tasks.training": "Training",
    "ragfactory.tasks.eval": "Eval",
    "ragfactory.tasks.data": "Data",
    "ragfactory.tasks.prompts": "Prompts",
}

# Imports (importing module, imported module) that close a cycle
# between parts but are exempt while later work removes them. A test fails once one of them is
# gone, so the list only shrinks; any other import that breaks a rule fails at once. It is
# empty: keep it empty.
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()


# Modules of a strategy's folder that belong to another part: the strategy names them (its
# ``exports``, ``training`` and ``evaluation`` fields, tasks/search/strategy.py), that part loads
# them by name, so Search never imports them.
STRATEGY_HOOKS = {"exports": "Export", "training": "Training", "evaluation": "Eval"}


def part_of(module: str) -> str | None:
    """The part (docs/architecture.md) of a project module, None for anything not ours. A
    strategy's exporters (``tasks/search/<name>/exports.py``) live in its folder but belong to
    Export: they declare ``Exporter`` rows, and the export registry loads them by name; so do its
    ``training.py`` (Training) and ``evaluation.py`` (Eval)."""
    parts = module.split(".")
    if parts[:3] == ["ragfactory", "tasks", "search"] and len(parts) == 5 and parts[4] in STRATEGY_HOOKS:
        return STRATEGY_HOOKS[parts[4]]
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in PARTS:
            return PARTS[prefix]
    return None


def project_modules(root: Path, package_dirs: Mapping[str, str]) -> dict[str, Path]:
    """Every project module by dotted name, from pyproject's package-dir mapping."""
    modules = {}
    for package, folder in package_dirs.items():
        for path in _python_files(root / folder):
            rel = path.relative_to(root / folder).with_suffix("")
            names = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            modules.setdefault(".".join([package, *names]), path)
    return modules


def import_edges(modules: Mapping[str, Path]) -> set[tuple[str, str]]:
    """(importer, imported) for every import of a project module, lazy ones included;
    ``from pkg import mod`` counts as importing ``pkg.mod``."""
    edges = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            else:
                continue
            edges.update((name, t) for t in targets if part_of(t) is not None and t != name)
    return edges


def part_arrows(edges: Iterable[tuple[str, str]]) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """Arrows between distinct parts, each with the imports that make it."""
    arrows: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for src, dst in edges:
        a, b = part_of(src), part_of(dst)
        if a != b:
            arrows.setdefault((a, b), set()).add((src, dst))
    return arrows


def part_cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Groups of parts that import each other in a cycle (strongly connected, Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b in part_arrows(edges):
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def describe_cycles(edges: set[tuple[str, str]]) -> list[str]:
    """Each cycle with the imports inside it, to say which one to cut."""
    arrows = part_arrows(edges)
    lines = []
    for group in part_cycles(edges):
        lines.append(" <-> ".join(group))
        lines += [
            f"    {a} -> {b}: {src} imports {dst}"
            for (a, b), imports in sorted(arrows.items())
            if a in group and b in group
            for src, dst in sorted(imports)
        ]
    return lines


def _repo_edges() -> set[tuple[str, str]]:
    package_dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return import_edges(project_modules(REPO, package_dirs))


def test_every_project_module_has_a_part():
    package_dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    modules = project_modules(REPO, package_dirs)
    assert len(modules) > 50
    assert all(part_of(m) for m in modules)


def test_no_import_cycle_between_parts():
    lines = describe_cycles(_repo_edges() - KNOWN_EXCEPTIONS)
    assert not lines, "import cycles between parts:\n" + "\n".join(lines)


def test_known_exceptions_still_exist():
    gone = sorted(KNOWN_EXCEPTIONS - _repo_edges())
    assert not gone, f"no longer imported, drop them from KNOWN_EXCEPTIONS: {gone}"


def _fake_tree(root: Path, files: Mapping[str, str]) -> set[tuple[str, str]]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    package_dirs = {"ragfactory.tasks": "tasks", "ragfactory.warehouse": "warehouse", "ragfactory.schemas": "schemas"}
    return import_edges(project_modules(root, package_dirs))


def test_checker_catches_an_import_cycle_between_parts(tmp_path):
    edges = _fake_tree(
        tmp_path,
        {
            "tasks/llm/batcher.py": "from ragfactory.tasks.rewards import answer\n",
            "tasks/rewards/answer.py": "import ragfactory.tasks.valuation.values\n",
            "tasks/valuation/values.py": "from ragfactory.tasks.llm.batcher import x\n",
            "tasks/export/sft.py": "from ragfactory.tasks.llm import batcher\n",
        },
    )
    assert part_cycles(edges) == [["LLM", "Rewards", "Valuation"]]
    assert describe_cycles(edges)[0] == "LLM <-> Rewards <-> Valuation"


# --- One folder owns a strategy (docs/architecture.md, "Strategy plug-in") ----------------------

SEARCH = REPO / "tasks" / "search"
# The registry names every strategy, one line each: the one place outside their folders.
STRATEGY_REGISTRY = "tasks/search/registry.py"
# Python modules, SQL views (the warehouse's and the dashboard's), prompt templates and output
# grammars are scanned.
SCANNED = ("*.py", "*.sql", "*.txt", "*.lark")
# The paper each strategy follows (docs/papers.md), by its folder: code outside the folder may cite
# the paper by this name in prose (a docstring, a comment, a help text), never name the strategy.
PAPERS = {
    "apex": "APEX-Searcher",
    "decex": "DecEx-RAG",
    "mcts": "ReasonRAG",
    "r3": "R3-RAG",
    "treeps": "TreePS-RAG",
}
# Methods a paper introduced that other parts use by design, with the names they keep there:
# (module, name said) -> why. Each must still be said (the list only shrinks).
BY_DESIGN = {
    ("tasks/rewards/sepr.py", "apex"): "SEPR, APEX-Searcher's plan reward, scores any plan",
    ("flows/config.py", "apex"): "GRPO's plan task trains a planner on APEX's gold plans with SEPR",
    ("ragfactory/cli/training.py", "apex"): "the same plan task, in the command's help",
    ("ragfactory/cli/training.py", "treeps"): "tree advantage, TreePS-RAG's training method",
}
_PROSE_TOKENS = (tokenize.COMMENT, tokenize.STRING)
_COMMENT_PREFIX = {".sql": "--", ".lark": "//"}


def strategy_folders(search: Path) -> list[str]:
    """The strategies' folder names (each a sub-package with a ``plugin.py``), which are their
    registered names."""
    return sorted(p.parent.name for p in search.glob("*/plugin.py"))


def _prose_spans(path: Path, text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the prose in ``text``: comments, and in Python the string
    literals with a space in them (docstrings, help texts); a prompt template has none."""
    lines = [0]
    for line in text.splitlines(keepends=True):
        lines.append(lines[-1] + len(line))
    if path.suffix == ".py":
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return [
            (lines[t.start[0] - 1] + t.start[1], lines[t.end[0] - 1] + t.end[1])
            for t in tokens
            if t.type == tokenize.COMMENT or (t.type == tokenize.STRING and re.search(r"\s", t.string))
        ]
    prefix = _COMMENT_PREFIX.get(path.suffix)
    if prefix is None:
        return []
    return [(m.start(), m.end()) for m in re.finditer(re.escape(prefix) + r".*", text)]


def names_said(path: Path, text: str, names: Iterable[str], papers: Iterable[str]) -> list[str]:
    """The strategy names ``text`` says as words, any case, lower-cased; a paper's name in prose is
    a citation, not a name."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b", re.IGNORECASE)
    citation = re.compile(r"\b(" + "|".join(map(re.escape, papers)) + r")\b")
    prose = _prose_spans(path, text)
    said = set()
    for match in pattern.finditer(text):
        in_prose = any(a <= match.start() < b for a, b in prose)
        if not (in_prose and citation.match(text, match.start())):
            said.add(match.group(1).lower())
    return sorted(said)


def modules_naming_a_strategy(root: Path, papers: Mapping[str, str]) -> dict[str, list[str]]:
    """``{file: [names it says]}`` for every project module, SQL view, prompt or grammar outside
    the strategies' folders that names a strategy (``papers``: folder name -> paper name) by its
    folder name or its paper's short name, in any case, in code, strings or comments."""
    names = {*papers, *(paper.split("-")[0].lower() for paper in papers.values())}
    found = {}
    for folder in ("tasks", "flows", "warehouse", "ragfactory", "schemas"):
        files = [p for glob in SCANNED for p in (root / folder).rglob(glob) if ".venv" not in p.parts]
        for path in sorted(files):
            rel = path.relative_to(root)
            if rel.parts[:2] == ("tasks", "search") and len(rel.parts) > 3 and rel.parts[2] in papers:
                continue
            said = names_said(path, path.read_text(encoding="utf-8"), names, papers.values())
            if said:
                found[rel.as_posix()] = said
    return found


def test_no_module_outside_a_strategy_folder_names_a_strategy():
    assert strategy_folders(SEARCH) == sorted(PAPERS)
    naming = modules_naming_a_strategy(REPO, PAPERS)
    said = {(m, name) for m, names in naming.items() if m != STRATEGY_REGISTRY for name in names}
    unexpected = sorted(said - set(BY_DESIGN))
    assert not unexpected, f"files outside tasks/search/<name>/ name strategies: {unexpected}"
    assert sorted(set(BY_DESIGN) - said) == [], "no longer said: drop them from BY_DESIGN"
    assert naming[STRATEGY_REGISTRY] == sorted(PAPERS)


def test_strategy_scan_catches_a_name_in_any_case_and_spares_the_folder(tmp_path):
    files = {
        "tasks/search/alpha/plugin.py": "ALPHA = 'alpha'\n",
        "tasks/search/alpha/exports.py": "# alpha's exporters\n",
        "tasks/search/alpha/views/alpha_tree.sql": "select * from nodes where strategy = 'alpha'\n",
        "tasks/search/alpha/prompts/alpha_step.txt": "Think like Alpha.\n",
        "tasks/export/sft.py": "if tree.strategy == 'alpha':\n    pass\n",
        "tasks/export/dpo.py": '"""Pairs as Alpha-Paper §2 ranks them."""\n\nRANK = "AlphaPaper"\n',
        "tasks/export/trace.py": "x = 1  # Alpha-Paper's default\nKEY = 'Alpha-Paper'\n",
        "tasks/eval/modes.py": '"""The loop Alpha writes."""\n',
        "tasks/prompts/judge.txt": "Judge as ALPHA does.\n",
        "tasks/prompts/judge.lark": "// Alpha-Paper, Table 2\nstart: alpha\n",
        "flows/config.py": "alpha_beta = 1  # alphabet, not alpha_ anything\n",
        "warehouse/sql/summary.sql": "-- per Alpha-Paper\nselect 'Alpha' as strategy from plan_scores\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert strategy_folders(tmp_path / "tasks" / "search") == ["alpha"]
    assert modules_naming_a_strategy(tmp_path, {"alpha": "Alpha-Paper"}) == {
        "tasks/eval/modes.py": ["alpha"],  # a docstring that names the strategy, not its paper
        "tasks/export/sft.py": ["alpha"],
        "tasks/export/trace.py": ["alpha"],  # the paper's name as a key is code, not a citation
        "tasks/prompts/judge.lark": ["alpha"],
        "tasks/prompts/judge.txt": ["alpha"],
        "warehouse/sql/summary.sql": ["alpha"],
    }
