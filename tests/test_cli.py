"""The command line: every command explains itself with an example; errors are clear."""

from __future__ import annotations

import csv
import io
import json

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
    assert {
        ("build",),
        ("sql",),
        ("tables",),
        ("train",),
        ("evaluate",),
        ("retrieval", "serve"),
        ("retrieval", "search"),
    } <= set(COMMANDS)


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


def test_sql_query_may_open_with_a_comment(warehouse):
    result = runner.invoke(
        app, ["sql", "-- a note\nselect 41 + 1 as answer", "--format", "csv", "--root", str(warehouse.root)]
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ['"answer"', "42"]


def test_sql_refusal_is_one_line_names_the_statement_and_writes_nothing(warehouse, tmp_path):
    target = tmp_path / "pwned.csv"
    result = runner.invoke(
        app, ["sql", f"explain analyze copy (select 42 as pwned) to '{target}'", "--root", str(warehouse.root)]
    )
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert len(result.output.strip().splitlines()) == 1
    assert result.output.startswith("error: refused: EXPLAIN ANALYZE COPY statements are not allowed")
    assert not target.exists()


def test_sql_refuses_a_file_outside_the_warehouse_naming_it(warehouse):
    result = runner.invoke(app, ["sql", "select * from read_text('/etc/passwd')", "--root", str(warehouse.root)])
    assert result.exit_code == 1
    assert result.output.startswith("error: refused: read_text('/etc/passwd') reads outside the warehouse")


@pytest.mark.parametrize("fmt", ["csv", "json", "table"])
def test_sql_prints_every_table_and_view_in_every_format(warehouse, fmt):
    from ragfactory.schemas.tables import TABLES
    from ragfactory.warehouse.catalog import query, sql_views
    from tests.warehouse.filled import ROWS_PER_TABLE, fill

    fill(warehouse)
    for name in [*TABLES, *sql_views()]:
        result = runner.invoke(app, ["sql", f'select * from "{name}"', "--format", fmt, "--root", str(warehouse.root)])
        assert result.exit_code == 0, (name, result.output)
        n_rows = ROWS_PER_TABLE if name in TABLES else query(warehouse, f'select * from "{name}"').num_rows
        if fmt == "csv":
            assert len(list(csv.DictReader(io.StringIO(result.output)))) == n_rows, name
        elif fmt == "json":
            assert len([json.loads(line) for line in result.output.splitlines()]) == n_rows, name


def test_sql_csv_and_json_carry_nested_columns_as_json(warehouse):
    from tests.warehouse.filled import fill

    fill(warehouse)
    sql = "select question_id, golden_answers, gold_plan from questions order by 1 limit 1"
    as_csv = runner.invoke(app, ["sql", sql, "--format", "csv", "--root", str(warehouse.root)])
    row = next(csv.DictReader(io.StringIO(as_csv.output)))
    assert row == {
        "question_id": "question_id-0",
        "golden_answers": '["golden_answers-0"]',
        "gold_plan": '[{"step": 1, "question": "question-0", "answer": "answer-0", "paragraph_support_idx": 1}]',
    }
    as_json = runner.invoke(app, ["sql", sql, "--format", "json", "--root", str(warehouse.root)])
    assert json.loads(as_json.output)["gold_plan"][0]["answer"] == "answer-0"


def test_a_whole_config_error_reads_as_one_plain_line(tmp_path):
    result = CliRunner().invoke(
        app, ["train", "--method", "prm", "--run-id", "demo-0123", "--option", "heldout=1", "--root", str(tmp_path)]
    )
    assert result.exit_code != 0
    assert result.output.strip() == (
        "error: train --method prm: unknown option(s) ['heldout']; known: heldout_fraction, max_length; "
        "every method's: trackers"
    )


def test_routine_prefect_states_stay_off_the_screen_and_every_other_line_shows(tmp_path):
    import logging

    from ragfactory.cli.common import _ScreenWithoutRoutineStates

    def shown(name: str, message: str) -> bool:
        record = logging.LogRecord(name, logging.INFO, __file__, 1, message, None, None)
        return _ScreenWithoutRoutineStates().filter(record)

    assert not shown("prefect.task_runs", "Finished in state Completed()")
    assert not shown("prefect.flow_runs", "Beginning flow run 'a-b' for flow 'build'")
    assert shown("prefect.task_runs", "Finished in state Failed('Task run encountered an exception')")
    assert shown("prefect.task_runs", "bamboogle: 125 questions, 0 passages, 0 rejects")
    assert shown("ragfactory", "Finished in state Completed()")  # only Prefect's own lines


def test_trl_overrides_read_exponent_numbers_as_numbers():
    from ragfactory.cli.common import key_values

    # YAML 1.1 reads 1e-4 (no dot) as the string "1e-4": the trainer then compared it with a float
    overrides = key_values(["learning_rate=1e-4", "max_steps=3", "optim=adamw_torch", "bf16=false"], "--trl")
    assert overrides == {"learning_rate": 1e-4, "max_steps": 3, "optim": "adamw_torch", "bf16": False}
