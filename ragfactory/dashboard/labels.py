"""The Rewards page's label panel: how far each build's process label sources agree (Spearman's
rho and Kendall's tau-b from the ``label_agreement`` view, as a source x source table per
strategy, gold support included) and what its trajectories' searches found (``search_behaviour``);
docs/labels.md says how each figure is computed."""

from __future__ import annotations

from ragfactory.dashboard.queries import Reader


def agreement_tables(reader: Reader, run: str) -> list[dict]:
    """Per strategy: its sources in order and a symmetric matrix of cells (``None`` on the
    diagonal and where two sources share no node), each cell ``{rho, tau_b, n}``."""
    by_strategy: dict[str, dict[tuple[str, str], dict]] = {}
    for row in reader.rows("label_agreement_run", run=run):
        cell = {"rho": row["rho"], "tau_b": row["tau_b"], "n": row["n_nodes"]}
        pairs = by_strategy.setdefault(row["strategy"], {})
        pairs[(row["source_a"], row["source_b"])] = pairs[(row["source_b"], row["source_a"])] = cell
    tables = []
    for strategy, pairs in sorted(by_strategy.items()):
        sources = sorted({a for a, _ in pairs})
        cells = [[pairs.get((a, b)) for b in sources] for a in sources]
        tables.append({"strategy": strategy, "sources": sources, "cells": cells})
    return tables


def label_panel(reader: Reader, run: str) -> dict:
    """What the panel shows of ``run``: the agreement tables and the search summary rows."""
    return {"agreement": agreement_tables(reader, run), "search": reader.rows("search_summary", run=run)}
