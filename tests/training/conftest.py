"""Training tests: a logger that keeps its lines (the tiny model is in tests/conftest.py)."""

from __future__ import annotations

import logging

import pytest


class ListLogger(logging.Logger):
    """A logger that keeps its formatted lines, to assert on progress output."""

    def __init__(self):
        super().__init__("training-test")
        self.lines: list[str] = []

    def _log(self, level, msg, args, *rest, **kwargs):
        self.lines.append(msg % args if args else msg)


@pytest.fixture
def log():
    return ListLogger()
