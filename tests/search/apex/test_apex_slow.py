"""APEX-Searcher end to end with the real CPU models (slow): plan, score, execute, write, query.

Two bundled two-hop MuSiQue questions, the embedded SmolLM2-135M as planner and executor, MiniLM for
SEPR, BM25 over the MuSiQue sample's paragraphs. A 135M model writes many malformed plans and
decisions; the run must record them as format errors and still finish every question.
"""

from __future__ import annotations

import asyncio

import pytest

from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.retrieval.bm25 import BM25Retriever
from ragfactory.tasks.rewards.sepr import load_plan_scorer
from ragfactory.tasks.search.apex.expansion import ApexConfig
from ragfactory.tasks.search.apex.exports import executor_sft_examples, planner_grpo_prompts
from ragfactory.tasks.search.shard import expand_shard
from ragfactory.warehouse.catalog import query, refresh_catalog
from ragfactory.warehouse.store import conform

pytestmark = pytest.mark.slow

CONFIG = ApexConfig(
    n_plans=2,
    plan_temperature=0.7,
    plan_max_tokens=176,
    max_steps=3,
    max_hops=1,
    top_k=2,
    exec_max_tokens=96,
    n_execute=1,
    execute_gold=True,
)


@pytest.fixture(scope="module")
def built(embedded_model, tmp_path_factory):
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
    from ragfactory.warehouse.store import Warehouse

    data = load_bundled("musique")
    data.questions = [q for q in data.questions if q["question_id"].startswith("musique:2hop")][:2]
    wh = Warehouse(tmp_path_factory.mktemp("warehouse"))
    retriever = BM25Retriever.build(conform("passages", data.passages))
    scorer = load_plan_scorer(CONFIG.sepr, wh.artifacts_dir("embeddings"), device="cpu")
    batcher = Batcher(TransformersBackend(embedded_model, TransformersSettings(device="cpu")))
    result = asyncio.run(expand_shard("apex", data.questions, batcher, retriever, CONFIG, "slow-run", 3, 2, scorer))
    for table in ("plans", "plan_scores", "nodes"):
        wh.write(table, getattr(result, table), "apex-0000")
    return data, wh, result


def test_every_question_is_planned_scored_and_executed(built):
    data, _, result = built
    ids = [q["question_id"] for q in data.questions]
    assert sorted({p["question_id"] for p in result.plans}) == sorted(ids)
    assert len(result.plans) == 2 * (CONFIG.n_plans + 1)
    assert len(result.plan_scores) == 2 * CONFIG.n_plans
    assert all(0.0 <= s["f1"] <= 1.0 and s["embedder"] == "all-MiniLM-L6-v2" for s in result.plan_scores)
    assert all(
        s["f1"] == 0.0
        for s in result.plan_scores
        if next(p for p in result.plans if p["plan_id"] == s["plan_id"])["is_format_error"]
    )
    answers = [n for n in result.nodes if n["kind"] == "answer"]
    assert len(answers) >= 2 * 2  # one planner (or fallback) run and the gold run per question
    for table in ("plans", "plan_scores", "nodes"):
        assert conform(table, getattr(result, table)).num_rows == len(getattr(result, table))


def test_format_errors_are_recorded_not_raised(built):
    _, _, result = built
    errors = [n for n in result.nodes if n["is_format_error"]]
    assert all(n["format_error"] for n in errors)
    assert all(p["format_error"] for p in result.plans if p["is_format_error"])


def test_view_joins_plans_scores_and_runs(built):
    _, wh, result = built
    refresh_catalog(wh)
    rows = query(wh, "select * from apex_plans order by question_id, plan_id").to_pylist()
    assert len(rows) == len(result.plans)
    scored = [r for r in rows if r["source"] == "planner"]
    assert all(r["f1"] is not None and r["tau"] == pytest.approx(0.7) for r in scored)
    executed = [r for r in rows if r["is_executed"]]
    assert len(executed) >= 4 and all(r["n_sub_questions"] >= 1 for r in executed)
    assert all(r["final_answer"] is not None or r["n_execution_format_errors"] > 0 for r in executed)


def test_exports_fit_their_tables(built):
    data, wh, result = built
    sft = executor_sft_examples(result.nodes, data.questions)
    grpo = planner_grpo_prompts(result.plans, result.plan_scores, data.questions)
    assert len(grpo) == 2
    wh.write("sft_examples", sft, "apex", partition={"run_id": "slow-run"})
    wh.write("grpo_prompts", grpo, "apex")
    assert wh.read("grpo_prompts").num_rows == 2


def test_embeddings_persist_for_the_next_run(built):
    _, wh, _ = built
    assert list(wh.artifacts_dir("embeddings").rglob("*.parquet"))
