"""Settings of the step preference pairs that search trees feed: the ``export.dpo`` section.

Which sibling pairs become preference data (DecEx-RAG §2.3 and A.2, ReasonRAG §2.2.3 read it);
the exporters live in their strategies' folders (``tasks/search/<name>/exports.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

LABELS = ("decision", "execution")


@dataclass(frozen=True)
class DpoConfig:
    """Which sibling pairs become preference data."""

    min_gap: float = 0.01  # a smaller value gap is rollout noise (ReasonRAG uses 0.01 too, §2.2.3)
    labels: tuple[str, ...] = LABELS  # Figure 2(b): dropping either kind of pair hurt

    def __post_init__(self):
        unknown = set(self.labels) - set(LABELS)
        if unknown:
            raise ValueError(f"DpoConfig.labels may hold {LABELS}, got unknown {sorted(unknown)}")
        if self.min_gap < 0:
            raise ValueError(f"DpoConfig.min_gap must be >= 0, got {self.min_gap}")
