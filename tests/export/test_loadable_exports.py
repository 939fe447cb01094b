"""A build where one strategy exports nothing: every export folder still loads with
``datasets.load_dataset``, and the warehouse's integrity check passes.

Two registered toy strategies: ``toy`` answers three questions with one scripted sample each and
exports an SFT example per question; ``mute`` grows bare trees and exports no SFT example and no
pair, so its
shards of both tables are empty: the case that used to write one row group of 0 rows, which
``datasets`` refuses for the whole folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.export.folders import export_targets, unloadable
from ragfactory.tasks.export.registry import EXPORTS, Exporter, StrategyExports
from ragfactory.tasks.search.common import question_fields
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.search.strategy import ShardContext, Strategy
from ragfactory.tasks.search.tree import QuestionTree, TableRows
from ragfactory.warehouse.integrity import check
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.test_build_toy_strategy import GOLD, ToyConfig, expand_toy, toy_sft


async def expand_mute(question: Mapping[str, Any], context: ShardContext, config: ToyConfig) -> TableRows:
    """A tree of the question alone: nothing to export."""
    question_id, text, _ = question_fields(question)
    tree = QuestionTree(context.run_id, question_id, "mute")
    tree.add_root(text)
    return tree.table_rows()


NODES = {"nodes": ("node_id", "run_id", "question_id", "kind", "text"), "questions": ("question_id", "question")}
TOY = StrategyExports("toy", (Exporter("sft_examples", NODES, toy_sft),))
MUTE = StrategyExports("mute", (Exporter("sft_examples", NODES, lambda *_: []),
                                Exporter("preference_pairs", NODES, lambda *_: [])))


@pytest.fixture
def strategies():
    with (STRATEGIES.registered(Strategy("toy", ToyConfig, expand_toy)), EXPORTS.registered(TOY),
          STRATEGIES.registered(Strategy("mute", ToyConfig, expand_mute)), EXPORTS.registered(MUTE)):
        yield


def test_an_empty_shard_has_no_row_group_and_every_reader_takes_it(tmp_path):
    wh = Warehouse(tmp_path)
    path = wh.write("sft_examples", [], "mute", partition={"run_id": "r"})
    assert pq.ParquetFile(path).metadata.num_row_groups == 0
    assert pq.read_table(path).num_rows == 0
    old_style = tmp_path / "old.parquet"  # what pq.write_table makes of an empty table
    pq.write_table(pa.table({"x": pa.array([], pa.int64())}), old_style)
    assert pq.ParquetFile(old_style).metadata.num_row_groups == 1


def test_a_strategy_that_exports_nothing_leaves_every_folder_loadable(tmp_path, strategies, engines, prefect_api):
    engines(ScriptedBackend(lambda request, sample: GOLD[request.messages[0].content]))
    root = tmp_path / "wh"
    summary = build(BuildConfig.model_validate({
        "name": "mute-test", "warehouse": {"root": str(root)},
        "datasets": [{"name": "hotpotqa", "limit": 3}],
        "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
        "retrieval": {"dense": {"enabled": False}}, "llm": scripted_llm(),
        "search": {"strategies": ["toy", "mute"]},
    }))
    assert summary["status"] == "completed", summary
    assert sorted(summary["exports"], key=lambda e: e["strategy"]) == [
        {"strategy": "mute", "sft_examples": 0, "preference_pairs": 0, "contaminated": 0},
        {"strategy": "toy", "sft_examples": 3, "contaminated": 0},
    ]
    wh, run = Warehouse(root), f"run_id={summary['run_id']}"
    folder = root / "sft_examples" / run
    assert sorted(p.name for p in folder.glob("*.parquet")) == ["mute.parquet", "toy.parquet"]
    loaded = datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "hf"))
    assert sorted(row["messages"][1]["content"] for row in loaded) == sorted(GOLD.values())

    assert [t.relative_to(root).as_posix() for t in export_targets(wh)] == [
        f"preference_pairs/{run}", f"sft_examples/{run}",
        f"artifacts/llamafactory/{summary['run_id']}/toy_sft.parquet",
    ]
    problems, n_loaded = unloadable(wh)
    assert [(p.path.relative_to(root).as_posix(), p.detail) for p in problems] == [
        (f"preference_pairs/{run}", "no rows: nothing for a trainer to load")]
    assert n_loaded == 2
    assert check(wh) == []  # the empty shards are recorded like any other
