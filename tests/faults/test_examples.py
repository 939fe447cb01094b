"""Every command example in README.md, in docs/ and in the command line's help runs as written.

The examples are read when the test runs (the ``bash`` blocks of README.md and docs/*.md: each ``ragfactory`` or
``curl`` line, continuations joined, comments dropped; each command's help: every backticked
``ragfactory ...`` or ``curl ...``), so an example edited, added or renamed is checked too.

What runs against a small warehouse (two rows in every table, ``tests/warehouse/filled.py``),
with ``--root`` pointed at it: every ``sql`` query (exit 0), ``tables``, ``check``, a BM25
``retrieval search``, and every ``curl`` against a real ``ragfactory retrieval serve`` (the JSON
it answers must hold results, so a request the server refuses fails). The others (``build``,
``train``, ``evaluate``, ``serve``, ``dashboard``, ``retrieval serve``: minutes of work, or a
server that runs until stopped) are parsed by the real command line: every option exists and
takes the value given; ``<placeholders>`` stand for any value.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from ragfactory.cli import app
from tests.warehouse.filled import fill

REPO = Path(__file__).resolve().parents[2]
RUN = {"sql", "tables", "check"}  # commands cheap enough to run on the small warehouse
_BLOCK = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)
_PLACEHOLDER = re.compile(r"<[^<>]+>")


def readme_examples() -> list[str]:
    """The ``ragfactory`` and ``curl`` command lines of the shell blocks of README.md and docs/."""
    found = []
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    for block in _BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True) if line.strip() else []
            if words and words[0] in ("ragfactory", "curl"):
                found.append(shlex.join(words))
    return found


def help_examples() -> list[str]:
    """Every backticked ``ragfactory ...`` / ``curl ...`` in the help of every command."""
    found = []

    def visit(command: click.Command) -> None:
        found.extend(re.findall(r"`((?:ragfactory|curl) [^`]+)`", command.help or ""))
        for sub in getattr(command, "commands", {}).values():
            visit(sub)

    visit(typer.main.get_command(app))
    return found


EXAMPLES = sorted(set(readme_examples() + help_examples()))


def test_the_examples_are_found():
    assert any(e.startswith("ragfactory sql ") for e in readme_examples())
    assert any(e.startswith("curl ") for e in readme_examples())
    assert any(e.startswith("curl ") for e in help_examples())
    assert any(e.startswith("ragfactory build ") for e in help_examples())


def _command(words: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """(the click command an argument list names, its path, the arguments left for it)."""
    command, path = typer.main.get_command(app), []
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        path.append(words[0])
        command, words = command.commands[words[0]], words[1:]
    return command, path, words


def _with_root(args: list[str], root: Path) -> list[str]:
    """``args`` with ``--root`` (any value given, or none) set to ``root``."""
    out, skip = [], False
    for word in args:
        if skip:
            skip = False
        elif word == "--root":
            skip = True
        else:
            out.append(word)
    return [*out, "--root", str(root)]


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.startswith("ragfactory ")])
def test_a_command_example_runs_or_parses(example, tmp_path):
    words = shlex.split(_PLACEHOLDER.sub("placeholder", example))[1:]
    command, path, args = _command(words)
    runs = path[-1:] == ["search"] and "dense" not in args or (path and path[0] in RUN)
    if not runs:
        command.make_context(" ".join(path), list(args))  # raises on an unknown option or a bad value
        return
    root = fill(_warehouse(tmp_path))
    result = CliRunner().invoke(app, [*path, *_with_root(args, root.root)])
    assert result.exit_code == 0, f"{example}\n{result.output}"


def _warehouse(tmp_path: Path):
    from ragfactory.warehouse.store import Warehouse

    return Warehouse(tmp_path / "wh")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def retrieval_server(tmp_path_factory):
    """`ragfactory retrieval serve` (BM25) over the small warehouse's passages; its port."""
    root = fill(_warehouse(tmp_path_factory.mktemp("served"))).root
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "ragfactory.cli", "retrieval", "serve", "--port", str(port), "--root", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    assert server.poll() is None, "the retrieval server did not start"
    yield port
    server.terminate()
    server.wait(timeout=30)


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.startswith("curl ")])
def test_a_curl_example_gets_results(example, retrieval_server):
    words = [w.replace("localhost:8000", f"127.0.0.1:{retrieval_server}") for w in shlex.split(example)]
    done = subprocess.run(words, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert "result" in answer and len(answer["result"]) == 1, done.stdout


@pytest.fixture(autouse=True)
def _prefect():
    """Overrides the folder's: this module runs no flow in this process, so no Prefect server."""
    yield
