"""A warehouse built before a change is the warehouse built after it.

Every table of a small DecEx + TreePS build (scripted engine; flow, tasks, batcher, cache, BM25
index and valuation real) is reduced to one content digest, pinned below as a literal. The
literals were computed by this test's build at commit 7f55a50, before valuation became its own
stage and the strategies moved onto one contract; a change that alters an id, a seed, a prompt,
a value or an exported row fails here and must say so (and change these literals on purpose).
Because ids and cache keys are unchanged, building again in the same warehouse finds every
shard and every call cached: no engine call, and the same bytes in every file.
"""

from __future__ import annotations

import hashlib
import json

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import treeps_and_decex

# Where the wall clock and the machine show through: when a call ran and how long it took, and
# where the bundled dataset file lies in this checkout.
VOLATILE = {"llm_calls": ("created_at", "latency_s"), "questions": ("source_file",)}
# Columns added after the literals were pinned (schema versions 7 and 9): left out of the digests,
# so the pinned values still prove every earlier column unchanged; what they hold is asserted below
# (the token columns: tests/export/test_tokens.py; the scripted engine reports no ids).
TOKENS = ("prompt_token_ids", "tokenizer_fingerprint")
ADDED = {
    "llm_calls": (
        "strategy",
        "question_id",
        "node_id",
        "cached",
        *TOKENS,
        "completion_token_ids",
        "completion_logprobs",
    ),
    "rollouts": ("metric", "metric_score"),
    "trajectories": (
        *TOKENS,
        "completion_token_ids",
        "loss_mask",
        "behaviour_logprobs",
        "step_token_spans",
        "dropped_sampled_tokens",
    ),
    "grpo_prompts": TOKENS,
    "verl_prompts": TOKENS,
}
GOLDEN = {
    "questions": "d857112eb243e5e1",
    "passages": "2c452904ec52c8fb",
    "nodes": "b2f30cf0a8ac67a5",
    "rollouts": "79482bc431e5eb8c",
    "llm_calls": "c755602eeaa7bbb6",
    "sft_examples": "07ec417bd2d33fcf",
    "preference_pairs": "52373e21195e7f14",
    "trajectories": "555ec4e61b5f2268",
    # verl_prompts: data_source is verl's reward name, searchR1_<dataset> (tasks/export/verl.py)
    "grpo_prompts": "de7d9f4df75ecc14",
    "verl_prompts": "b193626199ae1dfa",
    "step_labels": "44b69f948dd70c2f",
    "contamination": "e3b0c44298fc1c14",  # no row: nothing of this build is held out
}


def table_digest(wh: Warehouse, table: str) -> str:
    """sha256 (first 16 hex) of the table's rows, order-free, without its volatile columns."""
    rows = wh.read(table).drop_columns([*VOLATILE.get(table, ()), *ADDED.get(table, ())])
    lines = sorted(json.dumps(row, sort_keys=True, default=str) for row in rows.to_pylist())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def file_bytes(wh: Warehouse) -> dict[str, bytes]:
    return {
        str(p.relative_to(wh.root)): p.read_bytes()
        for table in GOLDEN
        for p in sorted((wh.root / table).rglob("*.parquet"))
    }


def test_the_build_is_the_one_pinned_and_a_rebuild_calls_no_engine(tmp_path, engines):
    backend = ScriptedBackend(treeps_and_decex)
    engines(backend)
    config = BuildConfig.model_validate(
        {
            "name": "golden",
            "warehouse": {"root": str(tmp_path / "wh")},
            "datasets": [{"name": "hotpotqa", "limit": 2}],
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(),
            "search": {
                "strategies": ["decex", "treeps"],
                "decex": {"k": 2, "n_rollouts": 2, "t_max": 1, "termination_samples": 1},
                "treeps": {"n": 4, "depth": 2},
            },
            "export": {"trajectories": {"n_samples": 2}},
        }
    )
    # the run id is given: a default one hashes the config, whose warehouse root is this tmp_path
    assert build(config, run_id="golden")["status"] == "completed"
    wh = Warehouse(config.warehouse.root)
    assert {t: table_digest(wh, t) for t in GOLDEN} == GOLDEN
    calls_by = wh.read("llm_calls").group_by("strategy").aggregate([("question_id", "count"), ("cached", "any")])
    assert sorted(calls_by.column("strategy").to_pylist()) == ["decex", "treeps"]
    assert calls_by.column("cached_any").to_pylist() == [False, False]
    assert sum(calls_by.column("question_id_count").to_pylist()) == wh.read("llm_calls").num_rows
    assert set(wh.read("rollouts").column("metric").to_pylist()) == {"f1", "em"}  # DecEx's, TreePS's
    before, calls = file_bytes(wh), backend.calls
    assert build(config, run_id="golden")["status"] == "completed"
    assert backend.calls == calls, "the rebuild called the engine"
    assert file_bytes(wh) == before
