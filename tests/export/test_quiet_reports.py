"""``ragfactory check --exports | cat`` prints the command's own lines and nothing else: no progress
bar, log line or warning of ``datasets`` (which loads every export folder), even with stderr on a
terminal, where the libraries draw their bars; and ``quiet_libraries`` leaves them as they were."""

from __future__ import annotations

import logging
import os
import pty
import subprocess
import sys
from pathlib import Path

from ragfactory.progress import quiet_libraries
from ragfactory.tasks.export.folders import export_targets
from ragfactory.tasks.export.llamafactory import write_llamafactory
from ragfactory.warehouse.store import Warehouse
from tests.warehouse.filled import fill, rows

CLI = Path(sys.executable).with_name("ragfactory")


def output_with_stderr_on_a_terminal(*args: str) -> list[str]:
    """The command's stdout (a pipe, as into ``| cat``) and stderr (a terminal), line by line."""
    terminal, stderr = pty.openpty()
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL)
    os.close(stderr)
    written = b""
    while True:
        try:
            chunk = os.read(terminal, 4096)
        except OSError:  # the command closed the terminal: it has exited
            break
        if not chunk:
            break
        written += chunk
    os.close(terminal)
    out = process.stdout.read()
    assert process.wait(timeout=120) == 0, (out, written)
    return (out + written).decode().replace("\r\n", "\n").splitlines()


def test_check_exports_prints_only_its_own_lines(tmp_path):
    root = tmp_path / "wh"
    wh = fill(Warehouse(root))  # two rows in every table, the exported ones among them (run r1)
    trainer = root / "artifacts" / "llamafactory" / "r1"
    write_llamafactory(trainer, "toy", {t: rows(t) for t in ("sft_examples", "preference_pairs")}, root)
    tables = ("grpo_prompts", "preference_pairs", "sft_examples", "step_labels", "trajectories", "verl_prompts")
    assert [p.relative_to(root).as_posix() for p in export_targets(wh)] == [
        *(f"{table}/run_id=r1" for table in tables),
        "artifacts/llamafactory/r1/toy_dpo.parquet",
        "artifacts/llamafactory/r1/toy_sft.parquet",
    ]

    lines = output_with_stderr_on_a_terminal(str(CLI), "check", "--exports", "--root", str(root))

    assert lines == [
        f"ok: every shard file under {root} matches its manifest entry",
        "ok: 8 export folder(s) and file(s) load with datasets.load_dataset",  # 6 folders, 2 files
    ]


def test_quiet_libraries_restores_the_loggers_and_bars_it_silenced():
    import datasets

    datasets_logger = logging.getLogger("datasets")
    level, bars_off = datasets_logger.level, datasets.utils.are_progress_bars_disabled()
    with quiet_libraries():
        assert datasets_logger.level == logging.ERROR
        assert datasets.utils.are_progress_bars_disabled()
        assert logging.getLogger("huggingface_hub").getEffectiveLevel() == logging.ERROR
    assert (datasets_logger.level, datasets.utils.are_progress_bars_disabled()) == (level, bars_off)
