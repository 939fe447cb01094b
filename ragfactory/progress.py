"""Progress bars for long CPU-bound steps (embedding a corpus, expanding a shard), and quiet
third-party bars when the output is a log rather than a terminal."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

# tqdm reads TQDM_<argument> as that argument's default (tqdm >= 4.66): transformers' GGUF
# conversion bar is a bare tqdm; its weight-loading bars follow Hugging Face Hub's switch.
QUIET_ENV = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def progress_bar(disable: bool = False) -> Progress:
    """A rich progress bar with counts and time left; use it as a context manager."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        disable=disable,
    )


def quiet_bars_in_logs(stream: TextIO | None = None) -> bool:
    """Turn third-party progress bars off when ``stream`` (stderr) is not a terminal: in a
    nightly log each refresh of a bar is a line of its own. Set in the environment, which flow
    runs in subprocesses inherit; a value the person set wins. True when they were turned off."""
    stream = stream or sys.stderr
    if stream.isatty():
        return False
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    return True
