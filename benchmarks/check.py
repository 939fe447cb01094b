"""`ragfactory check` on a warehouse of 10,000,000 `nodes` rows.

The warehouse: 100 shards of 100,000 synthetic rows (``benchmarks/warehouse.py``'s rows, with
texts drawn from 200,000 of 20 to 60 words from a 5,000-word vocabulary, so the files compress like real
node texts rather than to nothing), written by ``Warehouse.write`` with their manifest entries.
Measured: ``integrity.check`` (size and sha256 of every file, run on all cores) in seconds per
GB of Parquet, and the whole `ragfactory check` command in a fresh process (start-up included).
Goal: <= 10 s per GB on 2 cores. Also timed: opening a connection with every view (the per-file
manifest size test a query pays), median of 5.

Run: .venv/bin/python benchmarks/check.py [--rows 10000000] [--shards 100]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import median_seconds, report  # noqa: E402

from ragfactory.warehouse.catalog import connect  # noqa: E402
from ragfactory.warehouse.integrity import check  # noqa: E402
from ragfactory.warehouse.store import Warehouse  # noqa: E402
from warehouse import synthetic_nodes  # noqa: E402


def text_pool(n: int, rng: np.random.Generator) -> pa.Array:
    """``n`` texts of 20 to 60 words from a 5,000-word vocabulary."""
    vocabulary = np.array([f"w{i}{'x' * (i % 7)}" for i in range(5000)])
    lengths = rng.integers(20, 61, n)
    words = vocabulary[rng.integers(0, len(vocabulary), int(lengths.sum()))]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return pa.array([" ".join(words[offsets[i] : offsets[i + 1]]) for i in range(n)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=100)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    pool = text_pool(200_000, rng)  # more distinct texts than Parquet's dictionary page holds
    per_shard = args.rows // args.shards
    with tempfile.TemporaryDirectory() as tmp:
        wh = Warehouse(tmp)
        start = time.perf_counter()
        for shard in range(args.shards):
            rows = synthetic_nodes(per_shard, seed=shard)
            rows = rows.set_column(
                rows.schema.get_field_index("text"), "text", pool.take(rng.integers(0, len(pool), per_shard))
            )
            wh.write("nodes", rows, shard=f"s{shard:04d}")
            print(f"wrote shard {shard + 1}/{args.shards}", end="\r", file=sys.stderr, flush=True)
        write_s = time.perf_counter() - start
        size_gb = sum(p.stat().st_size for p in wh.files("nodes")) / 1e9
        print(
            f"\n{args.rows:,} rows, {size_gb:.2f} GB in {args.shards} files, written in {write_s:.1f} s",
            file=sys.stderr,
        )
        start = time.perf_counter()
        problems = check(wh)
        check_s = time.perf_counter() - start
        assert not problems, problems[:3]
        start = time.perf_counter()
        cli = subprocess.run(
            [sys.executable, "-m", "ragfactory.cli", "check", "--root", tmp],
            capture_output=True,
            text=True,
            env={**os.environ},
        )
        cli_s = time.perf_counter() - start
        assert cli.returncode == 0, cli.stdout + cli.stderr
        connect_s = median_seconds(lambda: connect(wh).close(), repeats=5)
    report(
        "check",
        [
            {
                "benchmark": f"integrity.check, {args.rows:,} node rows ({size_gb:.2f} GB), s per GB",
                "measured_s": round(check_s / size_gb, 2),
                "target_s": 10.0,
            },
            {
                "benchmark": "`ragfactory check` command (fresh process), s per GB",
                "measured_s": round(cli_s / size_gb, 2),
                "target_s": 10.0,
            },
            {
                "benchmark": f"connection with every view over {args.shards} files (median of 5)",
                "measured_s": round(connect_s, 3),
            },
        ],
    )


if __name__ == "__main__":
    main()
