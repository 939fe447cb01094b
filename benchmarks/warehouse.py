"""Warehouse benchmark: N `nodes` rows written, grouped through the catalog, and valued.

The rows are real trees (TreePS-shaped, ``benchmarks/valuation.py``), written as a build writes
them: one shard per ``--shard-rows`` rows, each committed with its manifest entry, then the
catalog refreshed. Grouped: a group-by over every row through the catalog's ``nodes`` view
(median of 5). Valued: the run's rows read back from the warehouse and given Monte-Carlo values
and advantages (``estimate_node_values``), the valuation stage's work.

``--store s3`` runs the same against an S3-compatible server started here on 127.0.0.1 (moto's
server mode): the writes upload every shard and its entry, and a second machine's mirror pulls
the whole warehouse (timed on its own row) before it groups and values.

Targets (scale-out, for 10,000,000 rows): write <= 5 s, group-by <= 0.5 s, value <= 5 s.
Run: .venv/bin/python benchmarks/warehouse.py [--rows 10000000] [--store local|s3]
Writes benchmarks/results/warehouse-<store>.json.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import median_seconds, report  # noqa: E402
from valuation import nodes_table, treeps_shape  # noqa: E402

from ragfactory.tasks.valuation.node_values import estimate_node_values  # noqa: E402
from ragfactory.warehouse.catalog import query, refresh_catalog  # noqa: E402
from ragfactory.warehouse.store import Warehouse  # noqa: E402

KINDS = np.array(["termination", "sub_question", "self_answer", "sub_query", "answer", "rollout_leaf"])


def synthetic_nodes(n: int, run_id: str = "bench", seed: int = 0) -> pa.Table:
    """Rows of the ``nodes`` shape without tree structure (``benchmarks/check.py``'s shards)."""
    rng = np.random.default_rng(seed)
    ids = np.char.add("n", np.arange(n).astype(str))
    depth = rng.integers(0, 5, n).astype(np.int32)
    return pa.table(
        {
            "node_id": ids,
            "run_id": np.full(n, run_id),
            "question_id": np.char.add("q", (np.arange(n) // 200).astype(str)),
            "parent_id": np.roll(ids, 1),
            "path": ids,
            "depth": depth,
            "strategy": np.full(n, "decex"),
            "kind": KINDS[rng.integers(0, len(KINDS), n)],
            "text": np.full(n, "<reasoning>step</reasoning><search>query</search>"),
            "is_leaf": depth == 4,
            "reward": rng.random(n),
            "visits": rng.integers(1, 10, n),
            "value": rng.random(n),
            "advantage": rng.normal(size=n),
            "is_selected": rng.random(n) < 0.2,
        }
    )


TARGETS = {"write": 5.0, "group": 0.5, "value": 5.0}
GROUP_BY = "select kind, depth, count(*) as n, avg(reward) as r from nodes group by 1, 2"


def s3_server() -> tuple[object, str]:
    """A moto S3 server on 127.0.0.1 with a bucket ``bench``; the process's AWS settings point at it."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    boto3.client("s3").create_bucket(Bucket="bench")
    return server, "s3://bench/wh"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--shard-rows", type=int, default=250_000, help="rows per shard, as a build's shards")
    parser.add_argument("--store", choices=["local", "s3"], default="local")
    args = parser.parse_args()
    rng = random.Random(0)
    rows = nodes_table([treeps_shape(rng) for _ in range(400)], args.rows, ["treeps"] * 400, 1)
    count = rows.num_rows
    cuts = list(range(0, count, args.shard_rows))
    server = None
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RAGFACTORY_HOME"] = str(Path(tmp) / "machine-a")
        if args.store == "s3":
            server, root = s3_server()
        else:
            root = str(Path(tmp) / "wh")
        wh = Warehouse(root)
        start = time.perf_counter()
        for index, cut in enumerate(cuts):
            wh.write("nodes", rows.slice(cut, args.shard_rows), shard=f"s{index:04d}")
        refresh_catalog(wh)
        write_s = time.perf_counter() - start
        del rows
        results = [
            {
                "benchmark": f"write {count:,} nodes in {len(cuts)} shards (+ catalog refresh)",
                "measured_s": round(write_s, 2),
                "target_s": TARGETS["write"],
            }
        ]
        if args.store == "s3":  # another machine: a fresh mirror pulls the store
            os.environ["RAGFACTORY_HOME"] = str(Path(tmp) / "machine-b")
            wh = Warehouse(root)
            start = time.perf_counter()
            pulled = wh.pull()
            refresh_catalog(wh)
            results.append(
                {
                    "benchmark": f"pull {pulled.downloaded} shards to a fresh mirror (+ catalog)",
                    "measured_s": round(time.perf_counter() - start, 2),
                }
            )
        group_s = median_seconds(lambda: query(wh, GROUP_BY), repeats=5)
        results.append(
            {
                "benchmark": "group-by via catalog (median of 5)",
                "measured_s": round(group_s, 3),
                "target_s": TARGETS["group"],
            }
        )

        def value() -> int:
            return estimate_node_values(wh.read("nodes", run_id="bench")).num_rows

        start = time.perf_counter()
        valued = value()
        value_s = time.perf_counter() - start
        assert valued == count, (valued, count)
        results.append(
            {
                "benchmark": f"read back and value {valued:,} nodes",
                "measured_s": round(value_s, 2),
                "target_s": TARGETS["value"],
            }
        )
    if server is not None:
        server.stop()
    report(f"warehouse-{args.store}", results)


if __name__ == "__main__":
    main()
