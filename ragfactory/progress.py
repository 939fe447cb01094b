"""Progress bars for long CPU-bound steps (embedding a corpus, expanding a shard), quiet
third-party bars when the output is a log rather than a terminal, and quiet libraries while a
report prints its own lines."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from typing import TextIO

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

# tqdm reads TQDM_<argument> as that argument's default (tqdm >= 4.66): transformers' GGUF
# conversion bar is a bare tqdm; its weight-loading bars follow Hugging Face Hub's switch.
QUIET_ENV = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def progress_bar(disable: bool = False, stream: TextIO | None = None) -> Progress | LineProgress:
    """A rich progress bar with counts and time left on a terminal; elsewhere (a pipe, a nightly
    log) a ``LineProgress`` that writes a line now and then. Use it as a context manager."""
    stream = stream or sys.stdout
    if not disable and not stream.isatty():
        return LineProgress(stream)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        disable=disable,
    )


class LineProgress:
    """Progress as plain lines, for output that is not a terminal (where a bar draws nothing until
    it ends): one line when a task has done another tenth of its total or, failing that, each
    ``every_s`` seconds, and one at the end; each with the count, the rate per minute and, with a
    total, the time left at that rate. The methods a bar's users call, ``add_task`` and ``advance``."""

    def __init__(self, stream: TextIO, every_s: float = 60.0, clock=time.monotonic):
        self.stream, self.every_s, self.clock = stream, every_s, clock
        self._tasks: list[dict] = []

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc) -> None:
        for task in self._tasks:
            if task["done"] != task["shown"]:
                self._line(task)

    def add_task(self, description: str, total: float | None = None) -> int:
        now = self.clock()
        self._tasks.append(
            {"description": description, "total": total, "done": 0, "shown": 0, "start": now, "last": now}
        )
        return len(self._tasks) - 1

    def advance(self, task_id: int, advance: float = 1) -> None:
        task = self._tasks[task_id]
        task["done"] += advance
        total, now = task["total"], self.clock()
        tenth = total and int(10 * task["done"] / total) > int(10 * task["shown"] / total)
        if tenth or now - task["last"] >= self.every_s:
            self._line(task)

    def _line(self, task: dict) -> None:
        now = self.clock()
        minutes = (now - task["start"]) / 60
        rate = task["done"] / minutes if minutes > 0 else 0.0
        line = f"{task['description']}: {task['done']:g}" + (f"/{task['total']:g}" if task["total"] else "")
        line += f" ({rate:.1f}/min"
        if task["total"] and rate > 0 and task["done"] < task["total"]:
            line += f", {(task['total'] - task['done']) / rate:.0f} min left"
        print(line + ")", file=self.stream, flush=True)
        task["shown"], task["last"] = task["done"], now


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
