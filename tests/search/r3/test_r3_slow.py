"""R3-RAG with the embedded model: attempts held to the step grammar, judged rewards, one SFT step (slow).

Two bundled HotpotQA questions (the demo's), the real SmolLM2-135M on CPU as policy and judge,
BM25 over the bundled HotpotQA paragraphs, the demo's small settings. Every step is well formed,
every step has its format and process rewards and every query its judged relevance (a verdict
held to its grammar reads). Algorithm 2's SFT rows (of the hand-worked scripted question,
``tests/search/r3/r3_scenario.py``, whose kept trajectory is known) load with ``datasets`` and train one
SFT step through the train flow's functions.
"""

from __future__ import annotations

import math

import pytest

from ragfactory.tasks.search.r3.config import R3Config
from ragfactory.tasks.search.r3.exports import r3_sft_examples
from ragfactory.warehouse.store import Warehouse
from tests.search.embedded_scenario import expand_bundled, train_one_step, written_dataset
from tests.search.r3.r3_scenario import QUESTION, run

pytestmark = pytest.mark.slow

QUESTION_IDS = ("hotpotqa:5ab4428c5542990594ba9bda", "hotpotqa:5ab90e9755429934fafe6e51")
CONFIG = R3Config(
    n_attempts=3,
    max_iterations=2,
    min_queries=1,
    answer_at_limit=True,
    top_k=2,
    doc_chars=256,
    max_tokens=96,
    metric="cover_em",
)


@pytest.fixture(scope="module")
def attempts(embedded_model):
    return expand_bundled("r3", QUESTION_IDS, CONFIG, embedded_model)[1]


def test_the_model_writes_well_formed_attempts_with_their_rewards(attempts):
    steps = [n for n in attempts.nodes if n["kind"] != "question"]
    assert {n["question_id"] for n in steps} == set(QUESTION_IDS)
    assert [(n["path"], n["format_error"]) for n in steps if n["is_format_error"]] == []
    first_steps = [n for n in steps if n["depth"] == 1]
    assert len(first_steps) == 2 * CONFIG.n_attempts
    names = {}
    for row in attempts.rewards:
        names.setdefault(row["node_id"], set()).add(row["name"])
    assert all({"format", "process"} <= names[n["node_id"]] for n in steps)
    queries = [n for n in steps if n["kind"] == "sub_query"]
    relevance = [r for r in attempts.rewards if r["name"] == "relevance"]
    assert len(relevance) == len(queries) and not any(r["is_format_error"] for r in relevance)
    assert all(0.0 <= r["value"] <= 1.0 for r in relevance)


def test_the_sft_rows_load_with_datasets_and_train_one_step(embedded_model, tmp_path):
    _, tree, _ = run()
    rows = r3_sft_examples(tree.node_rows(), [QUESTION])
    wh = Warehouse(tmp_path / "wh")
    data = written_dataset(wh, "sft_examples", [{**row, "run_id": "r3-slow"} for row in rows], "r3")
    assert data.num_rows == 2 and [m["role"] for m in data[1]["messages"]] == ["user", "assistant"]
    metrics = train_one_step(wh, "sft", "r3-slow", embedded_model, 1536)
    assert math.isfinite(metrics["train_loss"]) and metrics["global_step"] == 1
