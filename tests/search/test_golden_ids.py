"""Golden values: node ids, call ids, rollout seeds and whole shards of the three strategies.

Cached ``llm_calls`` rows are found by their call ids, and a rebuild over an existing warehouse
rewrites its tables byte for byte only if every id, seed and row comes out the same as before.
The literals below were taken from the code before strategies became registered plug-ins; a
change to any of them is a change to every warehouse already built, not a refactoring.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import pyarrow as pa
import pytest

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.seeds import derive_seed
from ragfactory.tasks.search.shard import expand_shard
from ragfactory.tasks.search.tree import node_id, stable_id
from ragfactory.tasks.valuation.node_values import estimate_node_values
from tests.fakes import FixedRetriever, FunctionRetriever, ScriptedBackend
from tests.search.apex import apex_scenario
from tests.search.decex import jaws_scenario
from tests.search.treeps import treeps_scenario


def shard(strategy, questions, reply, retriever, config, run_seed, scorer=None):
    """One shard through the shard runner; its rows per table and the llm_calls rows it used."""
    batcher = Batcher(ScriptedBackend(reply))
    rows = asyncio.run(expand_shard(strategy, questions, batcher, retriever, config, "run-1", run_seed, 2, scorer))
    return rows.tables(), batcher.cache.rows()


def digest(rows) -> str:
    payload = json.dumps(rows, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# wall-clock columns, the attribution columns of schema 8 (who asked: checked on their own) and the
# token columns of schema 9 (tests/export/test_tokens.py; the scripted engine reports no ids)
NOT_DIGESTED = (
    "created_at",
    "latency_s",
    "strategy",
    "question_id",
    "node_id",
    "cached",
    "prompt_token_ids",
    "completion_token_ids",
    "completion_logprobs",
    "tokenizer_fingerprint",
)


def call_digest(calls) -> str:
    """The llm_calls rows without their wall-clock and attribution columns."""
    return digest(
        sorted(({k: v for k, v in row.items() if k not in NOT_DIGESTED} for row in calls), key=lambda r: r["call_id"])
    )


def test_ids_and_seeds_are_the_literals_of_earlier_releases():
    assert stable_id("node", "r", "q") == "df06060cd96ca8ebc912dc1091ad6854"
    assert node_id("run-1", "jaws", "decex", "q/s0") == "9fe294da4da5e6137298e1eec8ef5154"
    assert derive_seed(11, "jaws", "q/s0/r") == 4115018019999337386


@pytest.fixture(scope="module")
def decex_shard():
    second = {**jaws_scenario.QUESTION, "question_id": "jaws-2"}
    return shard(
        "decex",
        [second, jaws_scenario.QUESTION],
        jaws_scenario.jaws_reply,
        FixedRetriever(jaws_scenario.RETRIEVAL),
        jaws_scenario.CONFIG,
        11,
    )


def test_decex_shard_rows_and_calls_are_unchanged(decex_shard):
    tables, calls = decex_shard
    nodes = tables["nodes"]
    assert [n["question_id"] for n in nodes[:1]] == ["jaws"]
    assert nodes[1]["node_id"] == "613213e26132d2c8ddd6b6d6f6a3c661" and nodes[1]["path"] == "q/a0"
    assert nodes[1]["llm_call_id"] == "dbc46f47b025e42160b4e52914d75b3c"
    assert tables["rollouts"][0]["seed"] == 4115018019999337386
    assert tables["rollouts"][0]["llm_call_ids"] == [
        "a755cdb0d43b255b190ee7102e4e5bcc",
        "969b52f6534afbd6a50398a82bc646e2",
    ]
    assert {t: len(r) for t, r in tables.items()} == {
        "nodes": 94,
        "rollouts": 40,
        "plans": 0,
        "plan_scores": 0,
        "rewards": 0,
    }
    assert {t: digest(r) for t, r in tables.items()} == {
        "nodes": "9c17ce967be51100",
        "rollouts": "febd36218a223989",
        "plans": "4f53cda18c2baa0c",
        "plan_scores": "4f53cda18c2baa0c",
        "rewards": "4f53cda18c2baa0c",
    }
    assert (len(calls), call_digest(calls)) == (90, "f12fe2c1193740cf")
    assert {c["question_id"] for c in calls} == {"jaws", "jaws-2"} and not any(c["cached"] for c in calls)


def valued(rows):
    """``nodes`` rows as the valuation stage rewrites them (through the table's schema)."""
    return estimate_node_values(pa.Table.from_pylist(rows, schema=table_spec("nodes").schema)).to_pylist()


def test_treeps_shard_rows_and_calls_are_unchanged():
    """TreePS valued its nodes inside the search before valuation became a stage: the digest of
    its nodes is that of the shard once the stage has valued it."""
    tables, calls = shard(
        "treeps",
        treeps_scenario.QUESTIONS,
        treeps_scenario.mixed,
        FunctionRetriever(treeps_scenario.two_groups),
        treeps_scenario.TreePSConfig(),
        5,
    )
    assert {n["value"] for n in tables["nodes"]} == {None}
    tables["nodes"] = valued(tables["nodes"])
    assert {t: len(r) for t, r in tables.items()} == {
        "nodes": 66,
        "rollouts": 52,
        "plans": 0,
        "plan_scores": 0,
        "rewards": 0,
    }
    assert {t: digest(r) for t, r in tables.items()} == {
        "nodes": "5589267720ad1d1c",
        "rollouts": "237e9c3eb328d13b",
        "plans": "4f53cda18c2baa0c",
        "plan_scores": "4f53cda18c2baa0c",
        "rewards": "4f53cda18c2baa0c",
    }
    assert (len(calls), call_digest(calls)) == (64, "c9884f25463363d8")


def test_apex_shard_rows_and_calls_are_unchanged():
    tables, calls = shard(
        "apex",
        [apex_scenario.QUESTION],
        apex_scenario.apex_reply,
        FixedRetriever(apex_scenario.RETRIEVAL),
        apex_scenario.CONFIG,
        7,
        apex_scenario.scorer(),
    )
    assert {t: len(r) for t, r in tables.items()} == {
        "nodes": 29,
        "rollouts": 0,
        "plans": 4,
        "plan_scores": 3,
        "rewards": 0,
    }
    assert {t: digest(r) for t, r in tables.items()} == {
        "nodes": "2fc472d0f02c149e",
        "rollouts": "4f53cda18c2baa0c",
        "plans": "4b309f4049fe53e2",
        "plan_scores": "3f54963190450302",
        "rewards": "4f53cda18c2baa0c",
    }
    assert (len(calls), call_digest(calls)) == (23, "578ce979d6ec5af1")
