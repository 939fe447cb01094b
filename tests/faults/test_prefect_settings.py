"""Each command's flow runs under the Prefect settings the command set, read inside the flow.

Prefect reads its settings once, when it is imported; a command that set them after something
had imported Prefect would run its flows with Prefect's defaults (the user's ``~/.prefect`` as
home, a 20 s server start-up timeout), whatever the environment said later. So the settings are
read where they act: every flow logs ``prefect settings: home=… server_startup_timeout_s=…`` from
Prefect's own ``get_current_settings()``, and each test reads that line from the command's log
(a shell's environment: no Prefect variable set). ``build`` is checked by
``test_children.py``'s kill of a build, ``check --repair`` by ``test_repair.py``; here ``train``
(on an export that lacks the method's columns: the flow starts, logs, then fails) and
``evaluate`` (one question, 16 tokens). Slow: each starts Prefect's temporary server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def _run(args: list[str], root: Path, **extra: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The command's result and the ``prefect settings`` lines of its flows' logs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    done = subprocess.run(
        [sys.executable, "-m", "ragfactory.cli", *args, "--root", str(root)],
        env=env | {"COLUMNS": "400", **extra},
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [
        line.split("prefect settings: ", 1)[1]
        for log in sorted((root / "logs").glob("*.log"))
        for line in log.read_text().splitlines()
        if "prefect settings: " in line
    ]
    return done, lines


def _assert_own_settings(lines: list[str]) -> None:
    assert lines, "no flow logged its settings"
    for line in lines:
        home, timeout = (part.split("=", 1)[1] for part in line.split()[:2])
        assert Path(home).parent == Path(tempfile.gettempdir()) and Path(home).name.startswith("ragfactory-prefect-")
        assert timeout == "180"
        assert not Path(home).exists()  # removed when the command ended


def test_the_train_flow_runs_under_the_commands_prefect_settings(tmp_path):
    export = tmp_path / "no-messages.parquet"
    pq.write_table(pa.table({"text": ["a row without the messages column"]}), export)
    done, lines = _run(["train", "--method", "sft", "--parquet", str(export)], tmp_path / "wh")
    assert done.returncode == 1 and "needs column(s) ['messages']" in done.stdout, done.stdout + done.stderr
    _assert_own_settings(lines)


def test_the_evaluate_flow_runs_under_the_commands_prefect_settings(tmp_path):
    done, lines = _run(
        [
            "evaluate",
            "--model",
            "embedded",
            "-d",
            "bamboogle",
            "--limit",
            "1",
            "--mode",
            "direct",
            "--max-tokens",
            "16",
        ],
        tmp_path / "wh",
        RAGFACTORY_ENGINE="transformers",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _assert_own_settings(lines)


@pytest.fixture(autouse=True)
def _prefect():
    """Overrides the folder's: this module runs no flow in this process, so no Prefect server."""
    yield
