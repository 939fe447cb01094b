"""A build over a seeded world (docs/world.md): three split files of one dataset each land in their
partition, and with ``corpus.from_datasets: false`` only the world's corpus is indexed."""

from __future__ import annotations

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.data.world import WorldSpec, build_config, generate
from ragfactory.tasks.retrieval.bm25 import BM25Retriever
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse


@pytest.mark.slow  # the null engine's tokenizer and Prefect load
def test_a_world_build_ingests_every_split_and_searches_its_corpus_only(tmp_path):
    generate(WorldSpec(seed=0, questions=20, passages=400), tmp_path / "world")
    config = build_config(tmp_path / "world") | {
        "warehouse": {"root": str(tmp_path / "wh")},
        "llm": {"policy": {"backend": "null", "model": "embedded"}},
        "search": {"strategies": ["decex"], "questions_per_dataset": 2, "decex": {"k": 2, "n_rollouts": 1, "t_max": 1}},
    }
    summary = build(BuildConfig.model_validate(config), run_id="world")
    assert summary["status"] == "completed", summary["errors"]
    wh = Warehouse(tmp_path / "wh")
    # 20 questions at 0.6 / 0.15 / 0.25: 3 valid, 5 test, 12 train, each file its own partition
    counts = query(wh, "select partition, count(*) as n from questions group by 1 order by 1").to_pylist()
    assert counts == [{"partition": "test", "n": 5}, {"partition": "train", "n": 12}, {"partition": "valid", "n": 3}]
    # the index holds the corpus's 400 passages, not the rows' paragraphs a second time
    assert len(BM25Retriever.load(summary["indexes"]["bm25"]["path"]).passages) == 400
    expanded = query(wh, "select distinct question_id from nodes").column("question_id").to_pylist()
    assert len(expanded) == 2 and all(q.startswith("world:s0-train-") for q in expanded)
