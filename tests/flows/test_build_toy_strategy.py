"""A strategy the library does not ship, registered by the test and built through the build flow.

The toy strategy (``tests/toy_strategy.py``) answers each question with one greedy sample (a root and an ``answer`` node)
and exports one SFT example per question. Registering it (and its exporter) is all it takes:
the config accepts its name, the flow shards and expands it, the export task writes its table, and a rebuild is
answered from the call cache.
"""

from __future__ import annotations

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.export.registry import EXPORTS
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.toy_strategy import GOLD, TOY, TOY_EXPORTS


@pytest.fixture
def toy():
    with STRATEGIES.registered(TOY), EXPORTS.registered(TOY_EXPORTS):
        yield TOY


def _config(root) -> BuildConfig:
    return BuildConfig.model_validate(
        {
            "name": "toy-test",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "hotpotqa", "limit": 3}],
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(),
            "search": {"strategies": ["toy"], "shard_size": 2},
        }
    )


def test_an_unregistered_strategy_is_a_config_error_naming_the_known_ones(tmp_path):
    with pytest.raises(
        ValueError, match=r"unknown \['toy'\]; registered strategies: \['apex', 'decex', 'mcts', 'r3', 'treeps'\]"
    ):
        _config(tmp_path)


def test_a_registered_toy_strategy_builds_exports_and_rebuilds_from_cache(tmp_path, toy, engines):
    backend = ScriptedBackend(lambda request, sample: GOLD[request.messages[0].content])
    engines(backend)
    root = tmp_path / "wh"
    summary = build(_config(root))
    assert summary["status"] == "completed", summary
    assert [s["shard"] for s in summary["shards"]] == ["toy-0000", "toy-0001"]
    assert backend.calls > 0
    wh = Warehouse(root)
    nodes = query(wh, "select strategy, kind, reward from nodes order by question_id, path").to_pylist()
    assert nodes == [
        {"strategy": "toy", "kind": kind, "reward": reward}
        for _ in range(3)
        for kind, reward in (("question", None), ("answer", 1.0))
    ]
    assert summary["exports"] == [{"strategy": "toy", "sft_examples": 3, "contaminated": 0}]
    examples = query(wh, "select strategy, messages from sft_examples").to_pylist()
    assert sorted(e["messages"][1]["content"] for e in examples) == sorted(GOLD.values())

    calls = backend.calls
    again = build(_config(root))
    assert again["status"] == "completed"
    assert backend.calls == calls, "the rebuild called the engine"
    assert [s["cached"] for s in again["shards"]] == [True, True]
