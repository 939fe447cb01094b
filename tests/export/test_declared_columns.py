"""Each exporter declares the columns it reads: run on inputs of only those columns (the way the
export task reads them, ``tasks/training_data.py``), it writes the rows it writes from whole rows.

The trees come from each strategy's scripted scenario; ``llm_calls`` rows are made up for the
calls behind the nodes, so a declaration without ``llm_call_id`` would lose their token ids.
"""

from __future__ import annotations

import json
from functools import cache

import pytest

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.export.config import ExportConfig
from ragfactory.tasks.export.registry import EXPORTS
from ragfactory.tasks.search.registry import STRATEGIES
from tests.fakes import ScriptedBackend


def _calls(nodes: list[dict]) -> list[dict]:
    ids = sorted({n["llm_call_id"] for n in nodes if n.get("llm_call_id")})
    return [
        {
            "call_id": cid,
            "prompt_token_ids": [i, i + 1],
            "completion_token_ids": [i + 2],
            "completion_logprobs": [-0.5],
            "tokenizer_fingerprint": "made-up",
        }
        for i, cid in enumerate(ids)
    ]


def _treeps() -> dict:
    from tests.search.treeps.treeps_scenario import QUESTIONS, build, mixed

    trees, _, _ = build(mixed)
    nodes = [row for tree in trees for row in tree.node_rows()]
    questions = [dict(q, dataset="hotpotqa", split="train") for q in QUESTIONS]
    return {"nodes": nodes, "questions": questions, "llm_calls": _calls(nodes)}


def _decex() -> dict:
    from tests.search.decex.decex_trees import QUESTIONS, small_tree
    from tests.search.decex.jaws_scenario import QUESTION, expand

    nodes = expand()[0].node_rows() + small_tree()
    return {"nodes": nodes, "questions": [QUESTION, *QUESTIONS]}


def _mcts() -> dict:
    from tests.search.mcts.mcts_scenario import QUESTION, policy, search_jaws

    return {"nodes": search_jaws(ScriptedBackend(policy)).table_rows().nodes, "questions": [QUESTION]}


def _r3() -> dict:
    from tests.search.r3.r3_scenario import QUESTION, run

    return {"nodes": run()[1].node_rows(), "questions": [QUESTION]}


def _apex() -> dict:
    from tests.search.apex.apex_scenario import QUESTION, run

    tables = run()[0].tables()
    return {name: tables.get(name, []) for name in ("nodes", "plans", "plan_scores")} | {"questions": [QUESTION]}


SCENARIOS = {"treeps": _treeps, "decex": _decex, "mcts": _mcts, "r3": _r3, "apex": _apex}


@cache
def scenario(strategy: str) -> dict:
    return SCENARIOS[strategy]()


def _declared(inputs: dict, reads: dict) -> dict:
    return {table: [{c: row[c] for c in columns} for row in inputs[table]] for table, columns in reads.items()}


def _cases() -> list[tuple[str, int]]:
    return [(name, i) for name in sorted(SCENARIOS) for i in range(len(EXPORTS.get(name).exporters))]


def test_every_strategy_has_a_scenario():
    assert sorted(SCENARIOS) == sorted(STRATEGIES.names())


@pytest.mark.parametrize(("strategy", "index"), _cases())
def test_an_exporter_writes_the_same_rows_from_its_declared_columns(strategy, index):
    exporter = EXPORTS.get(strategy).exporters[index]
    inputs = scenario(strategy)
    whole = exporter.rows(inputs, ExportConfig(), 3)
    declared = exporter.rows(_declared(inputs, exporter.reads), ExportConfig(), 3)
    assert whole, f"the {strategy} scenario gives {exporter.table} no row to compare"
    assert json.dumps(declared, sort_keys=True, default=str) == json.dumps(whole, sort_keys=True, default=str)


@pytest.mark.parametrize(("strategy", "index"), _cases())
def test_an_exporter_of_trees_declares_less_than_the_whole_row(strategy, index):
    reads = EXPORTS.get(strategy).exporters[index].reads
    assert "nodes" not in reads or set(reads["nodes"]) < set(table_spec("nodes").schema.names)
