"""Every strategy with the embedded model, structured generation on and off (slow).

Two bundled questions per strategy, small trees, the real SmolLM2-135M on CPU and BM25 over the
questions' own paragraphs. Held to its prompts' grammars the model writes no malformed node; the
same trees generated freely (the role listed in ``free_roles``, as ``llm.policy.structured:
false`` does) record the 135M model's broken formats as format-error nodes, and still finish.

The six expansions (three strategies, grammars on and off) run at once on one engine behind one
``Scheduler``, as a build's shards do, so their requests share decode batches.
"""

from __future__ import annotations

import asyncio

import pytest

from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.retrieval.bm25 import BM25Retriever
from ragfactory.tasks.search.apex.expansion import ApexConfig
from ragfactory.tasks.search.decex.config import DecExConfig
from ragfactory.tasks.search.shard import expand_shard
from ragfactory.tasks.search.treeps.expansion import TreePSConfig
from ragfactory.warehouse.store import conform

pytestmark = pytest.mark.slow

CONFIGS = {
    "decex": DecExConfig(k=2, n_rollouts=1, t_max=1, termination_samples=1, max_tokens=72, rollout_max_turns=1),
    "treeps": TreePSConfig(n=3, depth=2, max_tokens=80, temperature=0.7),
    "apex": ApexConfig(n_plans=2, max_steps=2, plan_max_tokens=128, max_hops=1, exec_max_tokens=64, execute_gold=False),
}
DATASETS = {"decex": "hotpotqa", "treeps": "hotpotqa", "apex": "musique"}


@pytest.fixture(scope="module")
def backend(embedded_model):
    from ragfactory.tasks.llm.scheduler import Scheduler
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    return Scheduler(TransformersBackend(embedded_model, TransformersSettings(device="cpu")))


@pytest.fixture(scope="module")
def runs(backend, tmp_path_factory):
    """strategy -> {structured: rows} for both settings."""
    from concurrent.futures import ThreadPoolExecutor

    from ragfactory.tasks.rewards.sepr import load_plan_scorer

    inputs = {}
    for strategy, config in CONFIGS.items():
        data = load_bundled(DATASETS[strategy], limit=2)
        retriever = BM25Retriever.build(conform("passages", data.passages))
        scorer = None
        if strategy == "apex":
            scorer = load_plan_scorer(config.sepr, tmp_path_factory.mktemp("emb"), device="cpu")
        inputs[strategy] = (data.questions, retriever, config, scorer)

    def expand(strategy: str, structured: bool):
        questions, retriever, config, scorer = inputs[strategy]
        batcher = Batcher(backend, free_roles=frozenset() if structured else frozenset({"policy"}))
        return asyncio.run(expand_shard(strategy, questions, batcher, retriever, config, "slow", 7, 2, scorer))

    jobs = [(strategy, structured) for strategy in CONFIGS for structured in (True, False)]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        done = {job: pool.submit(expand, *job) for job in jobs}
    results = {strategy: {} for strategy in CONFIGS}
    for (strategy, structured), future in done.items():
        results[strategy][structured] = future.result()
    return results


@pytest.mark.parametrize("strategy", sorted(CONFIGS))
def test_held_to_its_grammars_the_model_writes_no_malformed_node(runs, strategy):
    rows = runs[strategy][True]
    assert len({n["question_id"] for n in rows.nodes}) == 2
    generated = [n for n in rows.nodes if n["llm_call_id"]]
    assert generated and not [(n["path"], n["format_error"], n["text"]) for n in generated if n["is_format_error"]]
    if strategy == "apex":
        assert rows.plans and not any(p["is_format_error"] for p in rows.plans)


@pytest.mark.parametrize("strategy", sorted(CONFIGS))
def test_free_generation_still_records_broken_formats_as_nodes(runs, strategy):
    rows = runs[strategy][False]
    assert len({n["question_id"] for n in rows.nodes}) == 2
    errors = [n for n in rows.nodes if n["is_format_error"]]
    assert errors and all(n["format_error"] for n in errors)
