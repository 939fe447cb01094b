"""The build flow's expand and export stages for DecEx, with a scripted engine.

The engine is the only double: the real flow, tasks, batcher, call cache, BM25 index and
warehouse run. A second build of the same config must make no engine call and rewrite
identical tables.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from ragfactory.cli import print_build_summary
from ragfactory.flows.build import build
from ragfactory.tasks import expand as expand_module
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.runs import default_run_id
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend
from tests.flows.scripted_policies import decex_config, decex_hotpotqa


def _table_bytes(wh: Warehouse, table: str) -> dict[str, object]:
    return {str(p.relative_to(wh.root)): pq.read_table(p) for p in wh.files(table)}


def test_build_expands_exports_and_rebuilds_from_cache(tmp_path, scripted, capsys):
    root = tmp_path / "wh"
    summary = build(decex_config(root))
    assert summary["status"] == "completed", summary
    assert [s["shard"] for s in summary["shards"]] == ["decex-0000", "decex-0001"]
    assert scripted.calls > 0
    wh = Warehouse(root)
    counts = query(
        wh,
        """
        select count(distinct question_id) as questions, count(*) filter (where is_selected) as kept,
               count(*) filter (where not is_selected) as pruned from nodes""",
    ).to_pylist()[0]
    assert counts["questions"] == 3 and counts["kept"] > 0 and counts["pruned"] > 0
    assert query(wh, "select count(*) as n from llm_calls").to_pylist()[0]["n"] > 0
    layers = query(wh, "select * from decex_layers where kind = 'sub_question' and layer = 0").to_pylist()
    assert len(layers) == 3
    for row in layers:
        assert row["n_kept"] == 1 and row["n_pruned"] == 1
        assert row["kept_value"] >= row["best_pruned_value"]
        assert [b["kept"] for b in row["branches"]].count(True) == 1
    assert summary["exports"][0]["sft_examples"] > 0
    assert summary["exports"][0]["preference_pairs"] > 0
    before = {t: _table_bytes(wh, t) for t in ("nodes", "rollouts", "llm_calls", "sft_examples", "preference_pairs")}

    report = {row["item"]: row["value"] for row in summary["report"]}
    assert report["shards"] == 2 and report["cached shards"] == 0 and report["engine calls"] > 0
    assert report["decex pairs"] == summary["exports"][0]["preference_pairs"]
    assert report["rows nodes"] == query(wh, "select count(*) as n from nodes").to_pylist()[0]["n"]

    calls = scripted.calls
    again = build(decex_config(root))
    assert again["status"] == "completed"
    assert scripted.calls == calls, "the rebuild called the engine"
    assert [s["cached"] for s in again["shards"]] == [True, True], "shard tasks were not cache hits"
    report = {row["item"]: row["value"] for row in again["report"]}
    assert report["cached shards"] == 2 and report["engine calls"] == 0
    print_build_summary(again)
    assert "shards: 2 (2 cached from an earlier run), engine calls: 0" in capsys.readouterr().out

    # A shard whose rows are gone runs again; the engine-call cache answers every request.
    (wh.shard_path("nodes", {"run_id": again["run_id"]}, "decex-0001")).unlink()
    third = build(decex_config(root))
    assert [s["cached"] for s in third["shards"]] == [True, False]
    assert scripted.calls == calls
    assert third["shards"][1]["engine"]["engine_calls"] == 0 and third["shards"][1]["engine"]["hits"] > 0
    after = {t: _table_bytes(wh, t) for t in before}
    for table in before:
        assert before[table].keys() == after[table].keys(), table
        for path in before[table]:
            assert before[table][path].equals(after[table][path]), path

    # A shard file rewritten with 1 of its rows is not trusted: the shard runs again and the
    # warehouse holds what it held before.
    nodes = wh.shard_path("nodes", {"run_id": again["run_id"]}, "decex-0000")
    pq.write_table(pq.read_table(nodes).slice(0, 1), nodes)
    fourth = build(decex_config(root))
    assert fourth["status"] == "completed"
    assert [s["cached"] for s in fourth["shards"]] == [False, True]
    after = {t: _table_bytes(wh, t) for t in before}
    for table in before:
        for path in before[table]:
            assert before[table][path].equals(after[table][path]), path


def test_a_failing_expand_shard_is_recorded_and_the_others_go_on(tmp_path, monkeypatch, engines):
    bad_question = load_bundled("hotpotqa", limit=3).questions[2]["question"]
    backend = ScriptedBackend(decex_hotpotqa, fail_when=lambda r: bad_question in r.messages[0].content)
    engines(backend)
    monkeypatch.setattr(expand_module.expand_trees, "retry_delay_seconds", [0, 0])
    state = build(decex_config(tmp_path / "wh"), return_state=True)
    assert state.is_failed() and state.name == "Partial"
    summary = state.result(raise_on_failure=False)
    assert summary["status"] == "partial"
    assert summary["failed_shards"] == ["decex-0001"]
    wh = Warehouse(tmp_path / "wh")
    assert query(wh, "select count(distinct question_id) as n from nodes").to_pylist() == [{"n": 2}]
    assert query(wh, "select status, failed_shards from runs").to_pylist() == [
        {"status": "partial", "failed_shards": ["decex-0001"]}
    ]


def test_latest_policy_model_builds_from_the_newest_model_of_its_lineage(tmp_path, scripted):
    from tests.training.exports import register_trained

    root = tmp_path / "wh"
    wh = Warehouse(root)
    register_trained(wh, tmp_path, "sft-old", "nightly-sft", day=1)
    newest = register_trained(wh, tmp_path, "sft-new", "nightly-sft", day=2)
    summary = build(decex_config(root), policy_model="latest:nightly-sft")
    assert summary["status"] == "completed"
    run = query(wh, "select config from runs where run_id = $r", {"r": summary["run_id"]}).to_pylist()[0]
    assert json.loads(run["config"])["llm"]["policy"]["model"] == newest
    assert summary["run_id"] != default_run_id("decex-test", decex_config(root).config_hash())

    with pytest.raises(LookupError, match="no trained model of lineage 'nothing'"):
        build(decex_config(root), policy_model="latest:nothing")


def test_build_publishes_its_table_and_sql_artifacts(tmp_path, scripted):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    summary = build(decex_config(tmp_path / "wh"))
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["build-decex-test", "build-decex-test-sql"]))
        )
    mine = [a for a in artifacts if summary["run_id"] in (a.description or "")]
    assert {a.type for a in mine} == {"table", "markdown"}
    table = max(
        (a for a in mine if a.type == "table"), key=lambda a: a.created
    )  # the newest: other tests built this run id
    data = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert {"item": "shards", "value": 2} in data
    markdown = max((a for a in mine if a.type == "markdown"), key=lambda a: a.created)
    assert f"where run_id = '{summary['run_id']}'" in markdown.data
    sql = markdown.data.split("```sql")[1].split("```")[0]
    for statement in filter(str.strip, sql.split(";")):
        assert query(Warehouse(tmp_path / "wh"), statement).num_rows > 0, statement


def test_a_build_without_pruning_exports_its_trees(tmp_path, scripted):
    """``no_pruning`` writes its nodes as strategy decex_no_pruning; the export reads them."""
    root = tmp_path / "wh"
    summary = build(decex_config(root, no_pruning=True))
    assert summary["status"] == "completed", summary
    [export] = summary["exports"]
    assert export["strategy"] == "decex_no_pruning"
    assert export["sft_examples"] > 0 and export["preference_pairs"] > 0
    rows = query(
        Warehouse(root),
        """
        select strategy, count(*) as n from sft_examples group by 1""",
    ).to_pylist()
    assert rows == [{"strategy": "decex_no_pruning", "n": export["sft_examples"]}]
