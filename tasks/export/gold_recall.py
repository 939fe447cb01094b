"""Keep SFT chains whose searches found the gold evidence: the ``export.require_gold_recall``
filter (docs/labels.md, "Search behaviour").

A chain's gold recall is that of its deepest node in the ``search_behaviour`` view: the gold
supporting paragraphs (HotpotQA and 2WikiMultiHopQA supporting facts, MuSiQue's supporting
paragraphs) whose titles the searches on its path returned, over all of them. Recall only grows
along a path, so the best of the chain's nodes is its deepest. A chain below the threshold, or
whose question has no gold paragraphs to check against (Bamboogle), is left out and its question
named in ``export_skips`` with the figures that decided it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.export.skips import skipped
from ragfactory.warehouse.sql_files import sql_file

EXPORTER = "sft_examples"
# One row per step node of the run's trees of one strategy: what the searches up to it found.
GOLD_RECALL_SQL = sql_file("ragfactory.tasks.export", "gold_recall")


@dataclass(frozen=True)
class _Question:
    """What ``skipped`` names: the chain's run, question and strategy."""

    run_id: str
    question_id: str
    strategy: str


def chain_recall(node_ids: Sequence[str], found: Mapping[str, Mapping[str, Any]]) -> tuple[int, int | None]:
    """(gold paragraphs found, the question's gold paragraphs) of a chain; hops None without gold."""
    rows = [found[n] for n in node_ids if n in found]
    if not rows or rows[0]["hops"] is None:
        return 0, None
    return max(int(r["gold_found"]) for r in rows), int(rows[0]["hops"])


def keep_gold_recall(
    rows: Sequence[Mapping[str, Any]], found: Mapping[str, Mapping[str, Any]], minimum: float
) -> list[Mapping[str, Any]]:
    """The ``sft_examples`` rows whose chain's gold recall is at least ``minimum``; each row left
    out is a skip (inside ``skips.recording``) saying why."""
    kept = []
    for row in rows:
        hits, hops = chain_recall(row["node_ids"] or [], found)
        question = _Question(row["run_id"], row["question_id"], row["strategy"])
        if hops is None:
            skipped(question, EXPORTER, "require_gold_recall: the question has no gold supporting paragraphs")
        elif hits / hops < minimum:
            skipped(
                question,
                EXPORTER,
                f"require_gold_recall: searches found {hits} of {hops} gold "
                f"paragraphs (recall {hits / hops:.2f} < {minimum:g})",
            )
        else:
            kept.append(row)
    return kept
