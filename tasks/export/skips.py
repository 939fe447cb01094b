"""Why an exporter gave a question no row: the ``export_skips`` table (docs/ledger.md, "Export skips").

An exporter that drops a question calls ``skipped`` with the question's tree, the table it
exports and one line of reason; the export task collects them with ``recording`` and writes them
beside the exported rows (one shard per run and strategy). Outside ``recording`` a skip is not
kept, so exporters called on their own (tests, notebooks) behave as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

TABLE = "export_skips"
_RECORDER: ContextVar[list[dict] | None] = ContextVar("ragfactory_export_skips", default=None)


@contextmanager
def recording() -> Iterator[list[dict]]:
    """Collect the skips exporters report inside the block; yields the list of rows."""
    rows: list[dict] = []
    token = _RECORDER.set(rows)
    try:
        yield rows
    finally:
        _RECORDER.reset(token)


def skipped(tree: Any, exporter: str, reason: str) -> None:
    """Record that ``exporter`` (the table it writes) gave ``tree``'s question no row, and why."""
    rows = _RECORDER.get()
    if rows is not None:
        rows.append(
            {
                "run_id": tree.run_id,
                "question_id": tree.question_id,
                "strategy": tree.strategy,
                "exporter": exporter,
                "reason": reason,
            }
        )


def skip_rows(rows: list[dict]) -> list[dict]:
    """The collected skips, one per (question, exporter, reason), in a stable order."""
    unique = {(r["question_id"], r["exporter"], r["reason"]): r for r in rows}
    return [unique[key] for key in sorted(unique)]
