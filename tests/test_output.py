"""Terminal output in a log: full column names, integers as integers, no third-party bars."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import duckdb
from rich.console import Console

from ragfactory.output import print_arrow
from ragfactory.progress import QUIET_ENV, quiet_bars_in_logs

NAMES = [f"n_column_with_a_long_name_{i:02d}" for i in range(16)]


def test_a_wide_table_keeps_every_column_name_when_not_on_a_terminal():
    table = duckdb.sql("select " + ", ".join(f"{i} as {name}" for i, name in enumerate(NAMES))).to_arrow_table()
    log = io.StringIO()
    print_arrow(table, Console(file=log, width=160))  # a file: not a terminal
    header = log.getvalue().splitlines()[1]
    assert all(name in header for name in NAMES) and "…" not in header


def test_a_hugeint_sum_prints_as_a_json_number(capsys):
    table = duckdb.sql("select sum(x) as s, sum(x) / 2 as half from range(5) t(x)").to_arrow_table()
    print_arrow(table, Console(file=io.StringIO()), fmt="json")
    assert json.loads(capsys.readouterr().out) == {"s": 10, "half": 5.0}
    log = io.StringIO()
    print_arrow(duckdb.sql("select sum(x) as s from range(5) t(x)").to_arrow_table(), Console(file=log))
    assert "│ 10 │" in log.getvalue()  # not "10" in quotes


def test_progress_bars_are_off_in_a_log_and_left_alone_on_a_terminal(monkeypatch):
    for name in QUIET_ENV:
        monkeypatch.setenv(name, "x")  # recorded, so the test leaves the environment as it was
        monkeypatch.delenv(name)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert quiet_bars_in_logs(Terminal()) is False and not any(n in os.environ for n in QUIET_ENV)
    assert quiet_bars_in_logs(io.StringIO()) is True
    assert {n: os.environ[n] for n in QUIET_ENV} == QUIET_ENV


def test_tqdm_draws_nothing_once_quieted():
    code = (
        "import io; from ragfactory.progress import quiet_bars_in_logs; quiet_bars_in_logs(io.StringIO()); "
        "from tqdm.auto import tqdm; list(tqdm(range(3), desc='converting'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENV}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_progress_in_a_log_is_a_line_a_tenth_with_its_rate_and_time_left():
    """20 questions, one every 6 s: a line every 2 (a tenth), 10 a minute, the rest at that rate;
    an open-ended task a line a minute; nothing written twice at the end."""
    from ragfactory.progress import LineProgress, progress_bar

    log, now = io.StringIO(), [0.0]
    assert isinstance(progress_bar(stream=log), LineProgress)
    with LineProgress(log, every_s=60.0, clock=lambda: now[0]) as bar:
        task = bar.add_task("rag: questions answered", total=20)
        passages = bar.add_task("embedding passages")
        for _ in range(20):
            now[0] += 6.0
            bar.advance(task)
        bar.advance(passages, 500)  # at 120 s: two minutes since it began, one line
        bar.advance(passages, 100)  # at once: no line until the end
    lines = log.getvalue().splitlines()
    assert lines[:2] == [
        "rag: questions answered: 2/20 (10.0/min, 2 min left)",
        "rag: questions answered: 4/20 (10.0/min, 2 min left)",
    ]
    assert lines[9] == "rag: questions answered: 20/20 (10.0/min)"
    assert lines[10:] == ["embedding passages: 500 (250.0/min)", "embedding passages: 600 (300.0/min)"]
