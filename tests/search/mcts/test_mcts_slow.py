"""ReasonRAG MCTS with the embedded model: valid trees, step pairs, one DPO step on them (slow).

Two bundled HotpotQA comparison questions (the demo's), the real SmolLM2-135M on CPU held to
the Reasoning / Grounding grammars, BM25 over the bundled HotpotQA paragraphs, and the demo's
small search (6 iterations, max_depth 4, a query first, cover-EM). The trees hold no malformed
step and give step preference pairs; the pairs are written to a warehouse, read back with
``datasets`` as a TRL job reads them, and train one DPO step through the train flow's functions.
"""

from __future__ import annotations

import math

import pytest

from ragfactory.tasks.search.mcts.config import MctsConfig
from ragfactory.tasks.search.mcts.exports import mcts_preference_pairs
from ragfactory.warehouse.store import Warehouse
from tests.search.embedded_scenario import expand_bundled, train_one_step, written_dataset

pytestmark = pytest.mark.slow

QUESTION_IDS = ("hotpotqa:5a851b0d5542997175ce1f7f", "hotpotqa:5a8753d95542994846c1cd63")
CONFIG = MctsConfig(iterations=6, max_depth=4, min_queries=1, max_tokens=72, temperature=0.7, metric="cover_em")


@pytest.fixture(scope="module")
def searched(embedded_model):
    """(questions, table rows) of the two MCTS trees."""
    return expand_bundled("mcts", QUESTION_IDS, CONFIG, embedded_model)


def test_the_model_grows_two_valid_trees_with_pairs(searched):
    questions, rows = searched
    assert len(questions) == 2 and {n["question_id"] for n in rows.nodes} == set(QUESTION_IDS)
    steps = [n for n in rows.nodes if n["kind"] != "question"]
    assert len(steps) == 2 * CONFIG.iterations
    assert [(n["path"], n["format_error"]) for n in steps if n["is_format_error"]] == []
    assert {n["kind"] for n in steps} >= {"sub_query", "evidence"}
    roots = [n for n in rows.nodes if n["kind"] == "question"]
    assert [n["visits"] for n in roots] == [CONFIG.iterations] * 2
    assert all(0.0 <= n["value"] <= 1.0 for n in rows.nodes)
    assert mcts_preference_pairs(rows.nodes, questions)


def test_the_pairs_load_with_datasets_and_train_one_dpo_step(searched, embedded_model, tmp_path):
    questions, rows = searched
    pairs = mcts_preference_pairs(rows.nodes, questions)
    wh = Warehouse(tmp_path / "wh")
    data = written_dataset(wh, "preference_pairs", pairs, "mcts")
    assert data.num_rows == len(pairs)
    assert [m["role"] for m in data[0]["prompt"]] == ["system", "user"]
    assert data[0]["chosen"][0]["role"] == data[0]["rejected"][0]["role"] == "assistant"
    metrics = train_one_step(wh, "dpo", "mcts-slow", embedded_model, 768)
    assert math.isfinite(metrics["train_loss"]) and metrics["global_step"] == 1
