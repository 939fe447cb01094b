"""A build on the null engine (``backend: null``): the five strategies at the demo's parameters,
through the real flow, tasks, batcher, call cache, BM25 index, valuation, exports and warehouse,
end with every node parsed (no format error) and every stage's tables written."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.warehouse.store import Warehouse
from tests.flows.configs import STRATEGIES, null_config


@pytest.mark.slow  # ~45 s on 2 shared cores: the tokenizer, APEX's SEPR embedder and Prefect load
def test_a_null_engine_build_runs_every_stage_without_a_format_error(tmp_path):
    config = BuildConfig.model_validate(null_config(tmp_path / "wh"))
    summary = build(config, run_id="null")
    assert summary["status"] == "completed", summary["errors"]
    wh = Warehouse(config.warehouse.root)
    nodes = wh.read("nodes")
    assert sorted(set(nodes.column("strategy").to_pylist())) == sorted(STRATEGIES)
    assert pc.sum(nodes.column("is_format_error")).as_py() == 0
    calls = wh.read("llm_calls")
    assert calls.num_rows > 0
    assert all(model.startswith("null/") for model in set(calls.column("model_fingerprint").to_pylist()))
    assert wh.read("sft_examples").num_rows > 0
