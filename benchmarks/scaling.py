"""Shards per minute with 1, 2 and 4 Dask workers on this machine, against the local runner.

Builds the same config (``--questions`` bundled HotpotQA questions, one per shard, TreePS with
``configs/demo.yaml``'s settings, the embedded CPU model, BM25) into a fresh warehouse with
``runner.kind: local`` and then ``runner.kind: dask`` with 1, 2 and 4 workers on a temporary
local cluster (the cores shared out among them, ``flows/runner.py``). Reported: the whole
build's wall seconds; the expansion's, which is that less the same build with no strategy
(ingest, index, catalog: the same work whatever the runner); shards per minute of expansion;
the speed-up over one worker; and whether the tables equal the local build's (they must).

Each build runs its own flow (an ephemeral Prefect server is started once for the script) and
each worker loads its own copy of the model: that load is in the stage's time, as it is in a
real build's.

Run: .venv/bin/python benchmarks/scaling.py [--questions 8] [--workers 1 2 4]
Writes benchmarks/results/scaling.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

from ragfactory.flows.build import build  # noqa: E402
from ragfactory.flows.config import BuildConfig, load_build_config  # noqa: E402
from ragfactory.schemas.tables import TABLES  # noqa: E402
from ragfactory.warehouse.store import Warehouse  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VOLATILE = {
    "runs": {"started_at", "finished_at", "flow_run_id", "config", "config_hash"},
    "ingests": {"created_at"},
    "llm_calls": {"created_at", "latency_ms", "latency_s", "cached"},
}


def config(root: Path, questions: int, runner: dict, strategies: tuple = ("treeps",)) -> BuildConfig:
    demo = load_build_config(REPO / "configs" / "demo.yaml")
    return BuildConfig.model_validate(
        {
            "name": "scaling",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "hotpotqa", "limit": questions}],
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
            "corpus": {"from_datasets": True},
            "retrieval": {"dense": {"enabled": False}},
            "llm": demo.llm.model_dump(mode="json"),
            "search": {
                "strategies": list(strategies),
                "shard_size": 1,
                "treeps": dataclasses.asdict(demo.search.treeps),
            },
            "runner": runner,
        }
    )


def rows(root: Path) -> dict[str, list[str]]:
    wh, tables = Warehouse(root), {}
    for table in TABLES:
        found = [r for p in wh.files(table) for r in pq.read_table(p).to_pylist()]
        drop = VOLATILE.get(table, set())
        tables[table] = sorted(repr(sorted((k, v) for k, v in r.items() if k not in drop)) for r in found)
    return tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    results, local = [], None
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        build(config(Path(tmp) / "fixed", args.questions, {"kind": "local"}, strategies=[]), run_id="scaling")
        fixed = time.perf_counter() - start
        runners = [("local", {"kind": "local"})] + [
            (f"dask x{n}", {"kind": "dask", "workers": n}) for n in args.workers
        ]
        for name, runner in runners:
            root = Path(tmp) / name.replace(" ", "-")
            start = time.perf_counter()
            summary = build(config(root, args.questions, runner), run_id="scaling")
            wall = time.perf_counter() - start
            tables = rows(root)
            local = local or tables
            shards = len(summary["shards"])
            expand = wall - fixed
            results.append(
                {
                    "runner": name,
                    "shards": shards,
                    "status": summary["status"],
                    "build_s": round(wall, 1),
                    "expand_s": round(expand, 1),
                    "shards_per_min": round(shards / expand * 60, 2),
                    "same_tables": tables == local,
                    "cores": os.cpu_count(),
                }
            )
    one = next((r for r in results if r["runner"] == "dask x1"), None)
    for row in results:
        if one:
            row["speed_up_vs_1"] = round(row["shards_per_min"] / one["shards_per_min"], 2)
    report("scaling", results)


if __name__ == "__main__":
    main()
