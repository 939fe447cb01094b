"""A strategy the library does not ship, registered by the test and built through the build flow.

The toy strategy answers each question with one greedy sample (a root and an ``answer`` node)
and exports one SFT example per question. Registering it (and its exporter) is all it takes:
the config accepts its name, the flow shards and expands it, the export task writes its table, and a rebuild is
answered from the call cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.llm.types import Message, Request, Sampling
from ragfactory.tasks.search.common import Expansion, question_fields
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.export.registry import EXPORTS, ExportInputs, Exporter, StrategyExports
from ragfactory.tasks.search.strategy import ShardContext, Strategy
from ragfactory.tasks.search.tree import QuestionTree, TableRows, stable_id
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm

GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=3).questions}


@dataclass(frozen=True)
class ToyConfig:
    """One greedy answer per question."""

    max_tokens: int = 32  # a short answer


async def expand_toy(question: Mapping[str, Any], context: ShardContext, config: ToyConfig) -> TableRows:
    question_id, text, golden = question_fields(question)
    tree = QuestionTree(context.run_id, question_id, "toy")
    root = tree.add_root(text)
    exp = Expansion(tree, golden, context.generator, context.retriever, context.run_seed)
    path = f"{root.path}/a"
    sampling = Sampling(max_tokens=config.max_tokens, seed=exp.seed(path))
    [completion] = await exp.sample(Request((Message("user", text),), sampling, "policy", exp.tags(path)))
    scores = exp.scores(completion.text)
    tree.add_child(root, "a0", "answer", completion.text, parsed=scores, llm_call_id=completion.call_id,
                   is_leaf=True, reward=scores["em"])
    return tree.table_rows()


def toy_sft(inputs: ExportInputs, config: Any, run_seed: int) -> list[dict]:
    answers = [n for n in inputs["nodes"] if n["kind"] == "answer"]
    texts = {q["question_id"]: q["question"] for q in inputs["questions"]}
    return [{
        "example_id": stable_id("toy-sft", n["run_id"], n["node_id"]), "run_id": n["run_id"],
        "question_id": n["question_id"], "strategy": "toy", "node_ids": [n["node_id"]],
        "messages": [{"role": "user", "content": texts[n["question_id"]]},
                     {"role": "assistant", "content": n["text"]}],
    } for n in answers]


TOY = Strategy("toy", ToyConfig, expand_toy)
# the export task hands the exporter these columns only: reading one more would be a KeyError
TOY_EXPORTS = StrategyExports("toy", (Exporter(
    "sft_examples", {"nodes": ("node_id", "run_id", "question_id", "kind", "text"),
                     "questions": ("question_id", "question")}, toy_sft),))


@pytest.fixture
def toy():
    with STRATEGIES.registered(TOY), EXPORTS.registered(TOY_EXPORTS):
        yield TOY


def _config(root) -> BuildConfig:
    return BuildConfig.model_validate({
        "name": "toy-test",
        "warehouse": {"root": str(root)},
        "datasets": [{"name": "hotpotqa", "limit": 3}],
        "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
        "retrieval": {"dense": {"enabled": False}},
        "llm": scripted_llm(),
        "search": {"strategies": ["toy"], "shard_size": 2},
    })


def test_an_unregistered_strategy_is_a_config_error_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown \['toy'\]; registered strategies: \['apex', 'decex', 'mcts', 'r3', 'treeps'\]"):
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
    assert nodes == [{"strategy": "toy", "kind": kind, "reward": reward}
                     for _ in range(3) for kind, reward in (("question", None), ("answer", 1.0))]
    assert summary["exports"] == [{"strategy": "toy", "sft_examples": 3, "contaminated": 0}]
    examples = query(wh, "select strategy, messages from sft_examples").to_pylist()
    assert sorted(e["messages"][1]["content"] for e in examples) == sorted(GOLD.values())

    calls = backend.calls
    again = build(_config(root))
    assert again["status"] == "completed"
    assert backend.calls == calls, "the rebuild called the engine"
    assert [s["cached"] for s in again["shards"]] == [True, True]
