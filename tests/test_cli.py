"""The command line: every command explains itself with an example; errors are clear."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from ragfactory.cli import app

runner = CliRunner()


def _commands(group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in group.commands.items():
        found.append(prefix + (name,))
        if hasattr(command, "commands"):
            found.extend(_commands(command, prefix + (name,)))
    return found


COMMANDS = _commands(typer.main.get_command(app))


def test_top_level_help_shows_an_example():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "Example" in result.output and "ragfactory build" in result.output


def test_expected_commands_exist():
    assert {("build",), ("sql",), ("tables",), ("train",), ("evaluate",), ("retrieval", "serve"),
            ("retrieval", "search")} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_help_shows_an_example(command):
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output or "ragfactory " in result.output, command


def test_build_refuses_a_bad_config_naming_the_key(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("datasets:\n  - {name: hotpotqa, limitt: 3}\n")
    result = runner.invoke(app, ["build", "--config", str(config)])
    assert result.exit_code == 1
    assert "limitt" in result.output


def test_sql_rejects_unknown_format(warehouse):
    result = runner.invoke(app, ["sql", "select 1", "--format", "xml", "--root", str(warehouse.root)])
    assert result.exit_code == 1 and "--format" in result.output


def test_sql_reports_a_bad_query(warehouse):
    result = runner.invoke(app, ["sql", "select nope from questions", "--root", str(warehouse.root)])
    assert result.exit_code == 1 and "query failed" in result.output


def test_retrieval_search_without_passages_says_what_to_do(warehouse):
    result = runner.invoke(app, ["retrieval", "search", "x", "--root", str(warehouse.root)])
    assert result.exit_code == 1 and "ragfactory build" in result.output
