"""The run_cost view on a hand-built warehouse (warehouse/sql/run_cost.sql): engine time is the
union of overlapping call intervals, not the sum of latencies; cached samples cost nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _call(
    cid: str,
    strategy: str | None,
    end_s: float,
    latency_s: float,
    cached: bool | None = False,
    tokens: tuple[int, int] = (10, 5),
) -> dict:
    return {
        "call_id": cid,
        "run_id": "r1",
        "strategy": strategy,
        "created_at": T0 + timedelta(seconds=end_s),
        "latency_s": latency_s,
        "cached": cached,
        "prompt_tokens": tokens[0],
        "completion_tokens": tokens[1],
    }


def test_run_cost_per_strategy_without_joins(tmp_path):
    wh = Warehouse(tmp_path)
    wh.write(
        "llm_calls",
        [
            _call("a", "decex", 2.0, 2.0),
            _call("b", "decex", 3.0, 2.0),  # [0, 2] and [1, 3]: 3 s, not 4
            _call("c", "decex", 6.0, 1.0),  # [5, 6]: 1 s more
            _call("d", "decex", 9.0, 4.0, cached=True, tokens=(100, 100)),  # another run's: free
            _call("e", "treeps", 2.5, 0.5),
            _call("f", None, 1.0, 1.0, cached=None),  # an older row: no strategy, no flag
        ],
        "s0",
        partition={"run_id": "r1"},
    )
    wh.write(
        "retrievals",
        [
            {"retrieval_id": f"x{i}", "run_id": "r1", "strategy": "decex", "cache_key": key, "cached": cached}
            for i, (key, cached) in enumerate([("k1", False), ("k1", False), ("k2", True)])
        ],
        "s0",
        partition={"run_id": "r1"},
    )
    wh.write(
        "sft_examples",
        [{"example_id": f"e{i}", "run_id": "r1", "strategy": "decex"} for i in range(2)],
        "s0",
        partition={"run_id": "r1"},
    )
    rows = {r["strategy"]: r for r in query(wh, "select * from run_cost").to_pylist()}
    assert sorted(rows) == ["decex", "treeps", "unattributed"]
    decex = rows["decex"]
    assert (decex["engine_samples"], decex["cached_samples"], decex["prompt_tokens"], decex["completion_tokens"]) == (
        3,
        1,
        30,
        15,
    )
    assert decex["engine_seconds"] == 4.0 and decex["engine_seconds_per_sft_example"] == 2.0
    assert (decex["retrievals"], decex["retrieval_calls"], decex["cached_retrievals"]) == (3, 1, 1)
    assert decex["sft_examples"] == 2 and decex["tokens_per_sft_example"] == 22 and decex["preference_pairs"] == 0
    assert rows["treeps"]["engine_seconds"] == 0.5 and rows["treeps"]["retrievals"] == 0
    assert rows["unattributed"]["engine_samples"] == 1 and rows["unattributed"]["engine_seconds"] == 1.0
