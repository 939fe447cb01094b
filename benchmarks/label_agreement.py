"""How the ``label_agreement`` view scales with a run's step nodes (docs/labels.md, "Label
agreement").

Kendall's tau-b is counted over cells of equal value pairs, so its cost follows the number of
distinct (value, value) cells, not the square of the nodes. One synthetic TreePS run of N step
nodes, two label grids: ``coarse`` (MC values in quarters, as 4 rollouts give, advantages their
differences) and ``fine`` (both to two decimals: up to 10,000 cells, the worst case here). Each
is timed at N and 8 N; the ratio of the two times is the figure (8 for linear growth, 64 for
node pairs). The machine may be shared: compare ratios within one run, not seconds across runs.

Run: .venv/bin/python benchmarks/label_agreement.py [--nodes 4000]
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import report  # noqa: E402

import ragfactory.tasks.search.registry  # noqa: F401  (the strategies register their label views)
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse


def _seconds(n: int, grid: str) -> float:
    """Seconds of one ``label_agreement`` query over a run of ``n`` synthetic step nodes."""
    rng = random.Random(0)
    wh = Warehouse(tempfile.mkdtemp(prefix="agreement-"))
    rows = []
    for i in range(n):
        value = rng.randrange(5) / 4 if grid == "coarse" else round(rng.random(), 2)
        parent = rng.randrange(5) / 4 if grid == "coarse" else round(rng.random(), 2)
        rows.append(
            {
                "node_id": f"n{i}",
                "run_id": "r",
                "question_id": f"q{i // 50}",
                "strategy": "treeps",
                "path": f"q/{i}",
                "parent_id": "q",
                "depth": 1,
                "kind": "step",
                "is_format_error": rng.random() < 0.1,
                "value": value,
                "advantage": value - parent,
            }
        )
    wh.write("nodes", rows, "s0", partition={"run_id": "r"})
    started = time.perf_counter()
    query(wh, "select * from label_agreement")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4000)
    args = parser.parse_args()
    rows = []
    for grid in ("coarse", "fine"):
        small, large = _seconds(args.nodes, grid), _seconds(8 * args.nodes, grid)
        rows.append(
            {
                "grid": grid,
                "nodes": args.nodes,
                "seconds": round(small, 2),
                "nodes_x8": 8 * args.nodes,
                "seconds_x8": round(large, 2),
                "time_ratio": round(large / small, 1),
            }
        )
    rows.append({"grid": "peak RSS MiB", "nodes": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)})
    report("label_agreement", rows)


if __name__ == "__main__":
    main()
