"""Line-by-line JSONL reading that turns every bad line into a ``rejects`` row.

The ingest step of docs/architecture.md, "The data flow" (datasets (JSONL) -> questions, passages)
reads files written by many hands. A file is read in binary and each line decoded on its own, so one
line of invalid UTF-8 or broken JSON becomes one reject and the rest of the file still loads.
Gzip-compressed files (the Search-R1 ``wiki-18.jsonl.gz`` corpus) are read transparently. A file
that is not JSONL at all fails with one :class:`NotJsonlError` naming it. A line longer than
``JsonlLimits.max_line_bytes`` becomes a reject without being decoded or parsed: it is read in 1 MiB
blocks and dropped, so a 50 MB "passage" costs 1 MiB of memory, not 1.5 GB of Python objects and
Arrow buffers.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ragfactory.schemas.errors import PermanentError

GZIP_MAGIC = b"\x1f\x8b"
_BLOCK = 1 << 20
MAX_PASSAGE_CHARS = 32_768
LINE_BYTES_PER_PASSAGE_CHAR = 128


class NotJsonlError(PermanentError, ValueError):
    """A file that is not JSON Lines (a JSON array, a CSV, a binary file...); permanent: a retry
    reads the same bytes."""


class RowError(ValueError):
    """A line that parses but cannot become a row; the message is the reject reason."""


@dataclass(frozen=True)
class JsonlLimits:
    """How a JSONL file is read and judged."""

    raw_chars: int = 2000  # a reject keeps enough of its line to diagnose it, not a whole article
    sniff_lines: int = 100  # decide "not JSONL" early instead of scanning a multi-GB file
    sniff_bytes: int = 8192  # a NUL byte in the first block means binary (UTF-8 text has none)
    # The dense retriever reads 256 word pieces (~1,000 chars; all-MiniLM-L6-v2) and every hit
    # goes into the policy's prompt; the longest paragraph of the bundled benchmarks is 7,849
    # chars. 32 × the retriever's window keeps every real paragraph and Wikipedia passage and
    # refuses a whole document or a blob that would be embedded by its head and flood prompts.
    max_passage_chars: int = MAX_PASSAGE_CHARS
    # A benchmark line holds up to ~20 paragraphs (MuSiQue) of at most max_passage_chars, at up
    # to 4 UTF-8 bytes a char, plus its question: 128 bytes per passage char leaves that room.
    max_line_bytes: int = LINE_BYTES_PER_PASSAGE_CHAR * MAX_PASSAGE_CHARS

    @classmethod
    def for_passages(cls, max_passage_chars: int) -> JsonlLimits:
        """Limits whose line cap follows a configured passage size (128 bytes per char)."""
        return cls(max_passage_chars=max_passage_chars, max_line_bytes=LINE_BYTES_PER_PASSAGE_CHAR * max_passage_chars)


@dataclass(frozen=True)
class Line:
    """One line of a JSONL file that parsed as a JSON object."""

    number: int  # 1-based, counting blank lines
    record: dict
    text: str


def make_reject(
    dataset: str, source_file: str, line: int, reason: str, raw: str, limits: JsonlLimits = JsonlLimits()
) -> dict:
    """A ``rejects`` row; ``raw`` is cut to ``limits.raw_chars``."""
    return {
        "dataset": dataset,
        "source_file": source_file,
        "line": line,
        "reason": reason,
        "raw": raw[: limits.raw_chars],
    }


def read_lines(path: Path, dataset: str, rejects: list[dict], limits: JsonlLimits = JsonlLimits()) -> Iterator[Line]:
    """Yield the JSON-object lines of ``path``; append a reject for every other non-blank line.

    Raises :class:`NotJsonlError` when the file is binary, or when none of its first
    ``limits.sniff_lines`` non-blank lines is a JSON object.
    """
    source = str(path)
    with _open(Path(path)) as fh:
        if b"\0" in fh.peek(limits.sniff_bytes)[: limits.sniff_bytes]:
            raise NotJsonlError(f"{source}: not a JSONL file (binary content)")
        seen, first_problem, found_object = 0, "", False
        for number, (raw, size) in enumerate(_bounded_lines(fh, limits.max_line_bytes), start=1):
            if size is not None:  # too long to read: says nothing about whether the file is JSONL
                rejects.append(_overlong(dataset, source, number, raw, size, limits))
                continue
            text, parsed = _parse_line(raw, number)
            if parsed is None:
                continue
            seen += 1
            if isinstance(parsed, dict):
                found_object = True
                yield Line(number, parsed, text)
                continue
            first_problem = first_problem or f"line {number}: {parsed}"
            if not found_object and seen >= limits.sniff_lines:
                _refuse(source, seen, first_problem)
            rejects.append(make_reject(dataset, source, number, parsed, text, limits))
        if seen and not found_object:
            _refuse(source, seen, first_problem)


def _overlong(dataset: str, source: str, number: int, head: bytes, size: int, limits: JsonlLimits) -> dict:
    """The reject of a line over ``limits.max_line_bytes``; its first bytes show what it was."""
    reason = (
        f"line of {size:,} bytes, over the {limits.max_line_bytes:,}-byte limit "
        f"({LINE_BYTES_PER_PASSAGE_CHAR} x max_passage_chars {limits.max_passage_chars:,}); not read"
    )
    text = head[: 4 * limits.raw_chars].decode("utf-8", errors="replace")
    return make_reject(dataset, source, number, reason, text, limits)


def _bounded_lines(fh: IO[bytes], max_bytes: int) -> Iterator[tuple[bytes, int | None]]:
    """(line, None) for each line of at most ``max_bytes`` (newline excluded); (its first
    ``max_bytes`` bytes, its size) for a longer one, whose rest is read in blocks and dropped."""
    while raw := fh.readline(max_bytes + 1):
        if len(raw) <= max_bytes or raw.endswith(b"\n"):
            yield raw, None
            continue
        head, size = raw, len(raw)
        while not raw.endswith(b"\n") and (raw := fh.readline(_BLOCK)):
            size += len(raw)
        yield head, size - raw.endswith(b"\n")


def _open(path: Path) -> IO[bytes]:
    fh = open(path, "rb")
    if fh.peek(2)[:2] != GZIP_MAGIC:
        return fh
    fh.close()
    return gzip.open(path, "rb")


def _parse_line(raw: bytes, number: int) -> tuple[str, dict | str | None]:
    """The line's text and its JSON object, or the reason it is not one (None: blank line)."""
    raw = raw.rstrip(b"\r\n")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), "invalid UTF-8"
    if number == 1:
        # editors on Windows put a byte order mark before the first line, which json refuses
        text = text.removeprefix("\ufeff")
    if not text.strip():
        return text, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return text, f"invalid JSON: {exc.msg} at column {exc.colno}"
    except RecursionError:
        return text, "invalid JSON: nested too deeply"
    if not isinstance(value, dict):
        return text, f"expected a JSON object, got {type_name(value)}"
    return text, value


def _refuse(source: str, seen: int, first_problem: str) -> None:
    raise NotJsonlError(
        f"{source}: not a JSONL file (none of the first {seen} non-blank line(s) is a JSON object; {first_problem})"
    )


def type_name(value: object) -> str:
    """The JSON name of a value's type, for reject reasons."""
    names = {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)
