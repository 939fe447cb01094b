"""Progress bars for long CPU-bound steps (embedding a corpus, expanding a shard), quiet
third-party bars when the output is a log rather than a terminal, and quiet libraries while a
report prints its own lines."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
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


# the libraries whose loggers a report silences: the exports' loader and what it reads files with
LIBRARY_LOGGERS = ("datasets", "huggingface_hub", "fsspec", "filelock")


@contextlib.contextmanager
def quiet_libraries(loggers: tuple[str, ...] = LIBRARY_LOGGERS) -> Iterator[None]:
    """No third-party progress bar, log line or warning while a report prints its findings (on a
    terminal too, where ``quiet_bars_in_logs`` leaves bars on): the ``loggers`` at ERROR, Python's
    warnings ignored, and the bars of ``datasets`` and ``huggingface_hub`` off (each if imported);
    all as they were afterwards."""
    levels = {name: logging.getLogger(name).level for name in loggers}
    switches = _bar_switches()
    were_off = [off() for off, _, _ in switches]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in loggers:
            logging.getLogger(name).setLevel(logging.ERROR)
        for _, disable, _ in switches:
            disable()
        try:
            yield
        finally:
            for (_, _, enable), off in zip(switches, were_off, strict=True):
                if not off:
                    enable()
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


def _bar_switches() -> list[tuple]:
    """``(are_disabled, disable, enable)`` of each imported library with a switch for its bars."""
    switches = []
    if (datasets := sys.modules.get("datasets")) is not None:
        bars = datasets.utils
        switches.append((bars.are_progress_bars_disabled, bars.disable_progress_bars, bars.enable_progress_bars))
    if (hub := sys.modules.get("huggingface_hub.utils")) is not None:
        switches.append((hub.are_progress_bars_disabled, hub.disable_progress_bars, hub.enable_progress_bars))
    return switches
