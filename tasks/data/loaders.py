"""Load benchmark JSONL files into ``questions``, ``passages`` and ``rejects`` rows.

The first arrow of docs/architecture.md, "The data flow" (datasets (JSONL) -> questions, passages). The
rows fit ``schemas/tables.py`` as they are, so the ingest task hands them to the warehouse
writer unchanged. Bad rows never abort a load: each becomes a ``rejects`` row naming its line
and the field at fault, and the good rows load. The four bundled dev samples (HotpotQA,
2WikiMultiHopQA, MuSiQue, Bamboogle: the papers' evaluation sets) ship in ``ragfactory.data``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ragfactory.tasks.data.formats import ParsedRow, format_parser
from ragfactory.tasks.data.jsonl import JsonlLimits, Line, RowError, make_reject, read_lines
from ragfactory.tasks.data.passages import dedupe_passages, make_passage, oversize

__all__ = [
    "LoadResult",
    "bundled_names",
    "bundled_path",
    "dedupe_passages",
    "load_bundled",
    "load_questions",
]

BUNDLED_PACKAGE = "ragfactory.data"
BUNDLED_FILE = "dev.jsonl"


@dataclass
class LoadResult:
    """Rows for the ``questions``, ``passages`` and ``rejects`` tables."""

    questions: list[dict] = field(default_factory=list)
    passages: list[dict] = field(default_factory=list)
    rejects: list[dict] = field(default_factory=list)


def load_questions(
    path: Path,
    dataset: str,
    fmt: str | None = None,
    split: str = "dev",
    limit: int | None = None,
    limits: JsonlLimits = JsonlLimits(),
) -> LoadResult:
    """Read a benchmark file of format ``fmt`` (default: the dataset's name) into rows.

    ``limit`` keeps the first N good questions (rejects met before them are kept). Passages are
    the questions' context paragraphs, deduplicated by title and text, with source ``dataset``.
    A paragraph over ``limits.max_passage_chars`` is a reject naming its passage id and size;
    its question still loads (its other paragraphs make the corpus as before).
    Raises ``NotJsonlError`` (a ValueError) for a file that is not JSONL at all.
    """
    parse = format_parser(fmt or dataset)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    result, seen_ids, passages = LoadResult(), set(), {}
    if limit == 0:
        return result
    for line in read_lines(path, dataset, result.rejects, limits):
        try:
            row = parse(line.record, line.number)
            if row.original_id in seen_ids:
                raise RowError(f"duplicate id '{row.original_id}'")
        except RowError as exc:
            result.rejects.append(_reject(dataset, path, line, str(exc), limits))
            continue
        seen_ids.add(row.original_id)
        result.questions.append(_question(row, dataset, split, path, line.number))
        _add_passages(row, dataset, path, line, limits, passages, result.rejects)
        if limit is not None and len(result.questions) >= limit:
            break
    result.passages = list(passages.values())
    return result


def _add_passages(
    row: ParsedRow,
    dataset: str,
    path: Path,
    line: Line,
    limits: JsonlLimits,
    passages: dict[str, dict],
    rejects: list[dict],
) -> None:
    """Add a question's context paragraphs to ``passages`` (by passage id: the first copy stays),
    or to ``rejects`` each one over ``limits.max_passage_chars``."""
    for title, text in row.paragraphs:
        passage = make_passage(dataset, title, text)
        if (reason := oversize(passage, limits)) is not None:
            rejects.append(_reject(dataset, path, line, reason, limits))
            continue
        passages.setdefault(passage["passage_id"], passage)


def _question(row: ParsedRow, dataset: str, split: str, path: Path, line: int) -> dict:
    return {
        "question_id": f"{dataset}:{row.original_id}",
        "dataset": dataset,
        "split": split,
        "question": row.question,
        "golden_answers": row.golden_answers,
        "gold_plan": row.gold_plan,
        "metadata": json.dumps(row.metadata, ensure_ascii=False),
        "source_file": str(path),
        "source_line": line,
    }


def _reject(dataset: str, path: Path, line: Line, reason: str, limits: JsonlLimits) -> dict:
    return make_reject(dataset, str(path), line.number, reason, line.text, limits)


def bundled_names() -> list[str]:
    """The datasets shipped in ``ragfactory.data`` (each a folder holding ``dev.jsonl``)."""
    root = resources.files(BUNDLED_PACKAGE)
    return sorted(p.name for p in root.iterdir() if p.joinpath(BUNDLED_FILE).is_file())


def bundled_path(name: str) -> Path:
    """The path of a bundled dev file, ``ragfactory/data/<name>/dev.jsonl``."""
    candidate = resources.files(BUNDLED_PACKAGE).joinpath(name, BUNDLED_FILE)
    if "/" in name or "\\" in name or not candidate.is_file():
        raise ValueError(f"no bundled dataset {name!r}; bundled: {', '.join(bundled_names())}")
    return Path(str(candidate))


def load_bundled(name: str, limit: int | None = None) -> LoadResult:
    """Load a bundled dev file in its own format; its rows are named after the dataset."""
    return load_questions(bundled_path(name), name, name, split="dev", limit=limit)
