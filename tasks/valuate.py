"""Prefect task for the valuation stage: an expansion shard's ``nodes`` -> the same rows valued.

The build runs it after expansion and before export, once per expansion shard of every strategy
the ``valuation`` section values (``tasks/valuation/config.py``): it reads the shard's ``nodes``,
fills ``visits`` = |L(n)|, ``value`` = V(n) and ``advantage`` = A(n) with
``estimate_node_values`` (``tasks/valuation/node_values.py``, TreePS-RAG §2.3; a tree never spans two
shards, so a shard values on its own) and rewrites the shard, whose manifest entry the write
records. A shard whose values are already there (a rebuild from cache) is left untouched, so a
rebuild rewrites nothing and makes no engine call.
"""

from __future__ import annotations

import pyarrow.parquet as pq
from prefect import get_run_logger, task

from ragfactory.tasks.retry import retry_unless_permanent
from ragfactory.tasks.valuation.config import ValuationSection
from ragfactory.tasks.valuation.node_values import estimate_node_values
from ragfactory.warehouse.store import Warehouse, conform


@task(retries=1, retry_delay_seconds=5, retry_condition_fn=retry_unless_permanent, task_run_name="value-{shard}")
def value_nodes(root: str, run_id: str, shard: str, config: ValuationSection) -> dict:
    """Fill the valuation columns of one expansion shard's ``nodes`` and rewrite it when they
    changed; returns the shard, its node count and whether it was rewritten."""
    wh = Warehouse(root)
    path = wh.shard_path("nodes", {"run_id": run_id}, shard)
    if not path.exists():
        raise FileNotFoundError(f"valuation of shard {shard!r} (run {run_id}): no nodes shard at {path}")
    nodes = conform("nodes", pq.read_table(path))
    valued = estimate_node_values(nodes, config.params())
    rewritten = not valued.equals(nodes)
    if rewritten:
        wh.write("nodes", valued, shard, partition={"run_id": run_id})
    get_run_logger().info("%s: %d nodes valued%s", shard, valued.num_rows, "" if rewritten else " (unchanged)")
    return {"shard": shard, "nodes": valued.num_rows, "rewritten": rewritten}
