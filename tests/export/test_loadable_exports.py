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
from tests.toy_strategy import GOLD, ToyConfig, expand_toy, toy_sft


async def expand_mute(question: Mapping[str, Any], context: ShardContext, config: ToyConfig) -> TableRows:
    """A tree of the question alone: nothing to export."""
    question_id, text, _ = question_fields(question)
    tree = QuestionTree(context.run_id, question_id, "mute")
    tree.add_root(text)
    return tree.table_rows()


NODES = {"nodes": ("node_id", "run_id", "question_id", "kind", "text"), "questions": ("question_id", "question")}
TOY = StrategyExports("toy", (Exporter("sft_examples", NODES, toy_sft),))
MUTE = StrategyExports(
    "mute", (Exporter("sft_examples", NODES, lambda *_: []), Exporter("preference_pairs", NODES, lambda *_: []))
)


@pytest.fixture
def strategies():
    with (
        STRATEGIES.registered(Strategy("toy", ToyConfig, expand_toy)),
        EXPORTS.registered(TOY),
        STRATEGIES.registered(Strategy("mute", ToyConfig, expand_mute)),
        EXPORTS.registered(MUTE),
    ):
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
    summary = build(
        BuildConfig.model_validate(
            {
                "name": "mute-test",
                "warehouse": {"root": str(root)},
                "datasets": [{"name": "hotpotqa", "limit": 3}],
                "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
                "retrieval": {"dense": {"enabled": False}},
                "llm": scripted_llm(),
                "search": {"strategies": ["toy", "mute"]},
            }
        )
    )
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
        f"preference_pairs/{run}",
        f"sft_examples/{run}",
        f"artifacts/llamafactory/{summary['run_id']}/toy_sft.parquet",
    ]
    problems, n_loaded = unloadable(wh)
    assert [(p.path.relative_to(root).as_posix(), p.detail) for p in problems] == [
        (f"preference_pairs/{run}", "no rows: nothing for a trainer to load")
    ]
    assert n_loaded == 3  # and the LLaMA-Factory folder, by its dataset card
    assert check(wh) == []  # the empty shards are recorded like any other


def _example(run_id: str, n: int) -> dict:
    return {
        "example_id": f"e{n}",
        "run_id": run_id,
        "question_id": f"q{n}",
        "strategy": "toy",
        "messages": [{"role": "user", "content": f"question {n}"}, {"role": "assistant", "content": "Paris"}],
    }


def test_check_exports_finds_the_empty_row_group_a_warehouse_wrote_before(tmp_path):
    """``ragfactory check --exports`` on a folder holding a shard of one row group of 0 rows (as
    pyarrow's write_table made them), recorded in the manifest: the integrity check passes, the
    export check names the folder datasets refuses; once the shard is rewritten, both pass."""
    from typer.testing import CliRunner

    from ragfactory.cli import app
    from ragfactory.schemas.tables import table_spec
    from ragfactory.warehouse.integrity import adopt

    wh = Warehouse(tmp_path)
    wh.write("sft_examples", [_example("r", 1), _example("r", 2)], "toy")
    old = wh.shard_path("sft_examples", {"run_id": "r"}, "mute")
    pq.write_table(table_spec("sft_examples").schema.empty_table(), old)
    adopt(wh, check(wh))
    runner = CliRunner()
    result = runner.invoke(app, ["check", "--exports", "--root", str(tmp_path)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("ok: every shard file")
    assert lines[1].startswith(f"unloadable: {tmp_path / 'sft_examples' / 'run_id=r'}: ")
    assert "BatchSize must be greater than 0" in lines[1]
    wh.write("sft_examples", [], "mute", partition={"run_id": "r"})
    fixed = runner.invoke(app, ["check", "--exports", "--root", str(tmp_path)])
    assert fixed.exit_code == 0, fixed.output
    assert fixed.output.splitlines()[1:] == ["ok: 1 export folder(s) and file(s) load with datasets.load_dataset"]
