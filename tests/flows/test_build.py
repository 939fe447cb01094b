"""The build flow end to end on the bundled samples (BM25 only; dense is covered in retrieval)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ragfactory.cli import app
from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.schemas.tables import SCHEMA_VERSION
from ragfactory.warehouse.catalog import query

DATASETS = ["hotpotqa", "2wikimultihopqa", "musique", "bamboogle"]


def _config(root, **extra) -> BuildConfig:
    data = {
        "name": "test",
        "warehouse": {"root": str(root)},
        "datasets": [{"name": name, "limit": 5} for name in DATASETS],
        "retrieval": {"dense": {"enabled": False}},
    }
    data.update(extra)
    return BuildConfig.model_validate(data)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("wh")
    summary = build(_config(root))
    return root, summary


def test_build_ingests_four_datasets_and_indexes(built):
    root, summary = built
    assert summary["status"] == "completed"
    assert {r["source"] for r in summary["ingested"]} == set(DATASETS)
    assert summary["indexes"]["bm25"]["built"] is True
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(root)
    rows = query(wh, "select dataset, count(*) as n from questions group by 1 order by 1").to_pylist()
    assert rows == [{"dataset": d, "n": 5} for d in sorted(DATASETS)]
    run = query(wh, "select status, schema_version, failed_shards from runs").to_pylist()
    assert run == [{"status": "completed", "schema_version": SCHEMA_VERSION, "failed_shards": []}]


def test_rebuild_replaces_shards_and_loads_the_index(built):
    root, first = built
    second = build(_config(root))
    assert second["run_id"] == first["run_id"]
    assert second["indexes"]["bm25"]["built"] is False
    from ragfactory.warehouse.store import Warehouse

    n = query(Warehouse(root), "select count(*) as n from questions").to_pylist()
    assert n == [{"n": 20}]


def test_sql_command_shows_four_datasets(built):
    root, _ = built
    result = CliRunner().invoke(
        app,
        [
            "sql",
            "select dataset, count(*) as n from questions group by 1 order by 1",
            "--format",
            "json",
            "--root",
            str(root),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["dataset"] for r in rows] == sorted(DATASETS)


def test_sql_command_refuses_writes(built):
    root, _ = built
    result = CliRunner().invoke(app, ["sql", "drop view questions", "--root", str(root)])
    assert result.exit_code == 1
    assert "refused" in result.output


def test_tables_command_lists_counts_and_catalog(built):
    root, _ = built
    result = CliRunner().invoke(app, ["tables", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert "questions" in result.output and "catalog.duckdb" in result.output


def test_a_failing_shard_is_recorded_and_the_others_go_on(tmp_path):
    bad = tmp_path / "broken.jsonl"
    bad.write_text("this is not json\nnor this\n")
    config = _config(
        tmp_path / "wh",
        datasets=[{"name": "bamboogle", "limit": 3}, {"name": "custom", "format": "flashrag", "path": str(bad)}],
    )
    state = build(config, return_state=True)
    assert state.is_failed() and state.name == "Partial"  # never Completed in Prefect
    assert "custom" in state.message
    summary = state.result(raise_on_failure=False)
    assert summary["status"] == "partial"
    assert summary["failed_shards"] == ["custom"]
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(tmp_path / "wh")
    assert query(wh, "select count(*) as n from questions").to_pylist() == [{"n": 3}]
    assert query(wh, "select status, failed_shards from runs").to_pylist() == [
        {"status": "partial", "failed_shards": ["custom"]}
    ]
