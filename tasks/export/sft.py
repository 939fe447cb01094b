"""Settings of the SFT examples that search trees feed, and the question texts every exporter
puts in its prompts.

``SftConfig`` is the ``export.sft`` section: which best chain a question contributes (DecEx-RAG
§2.3 and ReasonRAG §2.2.3 read it); the exporters live in their strategies' folders
(``tasks/search/<name>/exports.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.search.tree import RowTree


@dataclass(frozen=True)
class SftConfig:
    """Which chain a question contributes."""

    prefer: str = "most_retrieval"  # tie-break between equal chains; Figure 2(a): "Most" trained best
    # A chain is exported when its final answer scores at least this. §2.3 takes every question's
    # best chain (0), but an answer that scores nothing teaches the wrong answer: 0.01 keeps any
    # partial credit (the least F1 of a short answer is ~0.1) and drops only zero-score chains.
    min_reward: float = 0.01

    def __post_init__(self):
        if self.prefer not in ("most_retrieval", "least_retrieval"):
            raise ValueError(f"SftConfig.prefer must be most_retrieval or least_retrieval, got {self.prefer!r}")


def question_texts(questions: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """question_id -> question text from ``questions`` rows."""
    texts = {}
    for i, row in enumerate(questions):
        if row.get("question_id") is None or row.get("question") is None:
            raise ValueError(f"questions row {i} needs question_id and question, got {sorted(row)}")
        texts[str(row["question_id"])] = str(row["question"])
    return texts


def question_text(texts: Mapping[str, str], tree: RowTree) -> str:
    if tree.question_id not in texts:
        raise ValueError(f"question {tree.question_id!r} of run {tree.run_id!r} is not in the questions given")
    return texts[tree.question_id]
