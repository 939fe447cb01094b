"""Errors that no retry can fix, and the one predicate that tells them from transient ones.

A missing or unreadable input file, a file that is not JSONL, a model name that resolves to
nothing on this machine, a config that does not validate: running the same task again gives the
same failure, only later. Task retries (Prefect's ``retry_condition_fn``, ``tasks/retry.py``)
ask :func:`is_permanent` and give up at once on these; anything else (a dropped connection, an
engine out of memory, a lock held by another process) still retries.

Plain Python (pydantic aside) and no import of ours, so loaders, resolvers, config models and the CLI can all
raise and recognise the same errors.
"""

from __future__ import annotations

import json

from pydantic import ValidationError


class PermanentError(Exception):
    """A failure that retrying cannot fix; the message names the thing at fault and the fix."""


# Errors of the input itself: the same file or config fails the same way on every attempt.
PERMANENT_TYPES: tuple[type[BaseException], ...] = (
    PermanentError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    UnicodeDecodeError,
    json.JSONDecodeError,
    ValidationError,
)


def is_permanent(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is one no retry can fix.

    >>> is_permanent(FileNotFoundError("data/x.jsonl"))
    True
    >>> is_permanent(ConnectionError("reset by peer"))
    False
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, PERMANENT_TYPES):
            return True
        exc = exc.__cause__
    return False
