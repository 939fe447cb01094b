"""Token-exact exports with the embedded model (slow): what the trainer gets is what was sampled.

One bundled HotpotQA question grown into a small TreePS-RAG tree by the real SmolLM2-135M on CPU
(BM25 over the bundled paragraphs, the shard runner a build uses, the call cache recording every
call as a build's ``llm_calls`` shard does). Its nodes, valued, and its calls are written to a
warehouse and exported by the registered TreePS exporters through the export task's own reader.
The exported token ids are compared with the ids the engine recorded (no decoding involved), the
behaviour log-probs with those it reported, and the tree-advantage trainer's features with the
exported ids.
"""

from __future__ import annotations

import asyncio

import pytest

from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.export.config import ExportConfig
from ragfactory.tasks.export.registry import EXPORTS
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.cache import CallCache
from ragfactory.tasks.retrieval.bm25 import BM25Retriever
from ragfactory.tasks.search.shard import expand_shard
from ragfactory.tasks.search.treeps.expansion import TreePSConfig
from ragfactory.tasks.training_data import export_inputs
from ragfactory.tasks.valuation.node_values import estimate_node_values
from ragfactory.warehouse.store import Warehouse, conform

pytestmark = pytest.mark.slow

RUN = "tokens-slow"
QUESTION_ID = "hotpotqa:5ab4428c5542990594ba9bda"
CONFIG = TreePSConfig(n=2, depth=2, max_tokens=64, temperature=0.7)


@pytest.fixture(scope="module")
def exported(embedded_model, tmp_path_factory):
    """(the run's llm_calls rows by id, {table: exported rows read back from the warehouse}, the
    call id of each node)."""
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    data = load_bundled("hotpotqa")
    questions = [q for q in data.questions if q["question_id"] == QUESTION_ID]
    retriever = BM25Retriever.build(conform("passages", data.passages))
    batcher = Batcher(TransformersBackend(embedded_model, TransformersSettings(device="cpu")), CallCache(RUN))
    rows = asyncio.run(expand_shard("treeps", questions, batcher, retriever, CONFIG, RUN, 0, 1))
    wh = Warehouse(tmp_path_factory.mktemp("wh"))
    wh.write("questions", conform("questions", data.questions), "hotpotqa")
    wh.write("nodes", estimate_node_values(conform("nodes", rows.nodes)), "treeps", partition={"run_id": RUN})
    batcher.cache.write(wh, "treeps")
    exports = EXPORTS.get("treeps")
    tables = exports.export(export_inputs(wh, RUN, "treeps", exports.reads), ExportConfig(), 0)
    for table in ("trajectories", "grpo_prompts", "verl_prompts"):
        wh.write(table, tables[table], "treeps", partition={"run_id": RUN})
    read = {t: wh.read(t, run_id=RUN).to_pylist() for t in ("trajectories", "grpo_prompts", "verl_prompts")}
    node_calls = {n["node_id"]: n["llm_call_id"] for n in rows.nodes}
    return {row["call_id"]: row for row in wh.read("llm_calls", run_id=RUN).to_pylist()}, read, node_calls


def test_every_call_records_its_tokens_and_their_logprobs(exported):
    calls, _, _ = exported
    assert calls
    for call in calls.values():
        assert len(call["completion_token_ids"]) == call["completion_tokens"] == len(call["completion_logprobs"])
        assert len(call["prompt_token_ids"]) == call["prompt_tokens"]
        assert all(lp <= 0.0 for lp in call["completion_logprobs"])
    assert len({call["tokenizer_fingerprint"] for call in calls.values()}) == 1 and call["tokenizer_fingerprint"]


def test_exported_token_ids_and_logprobs_are_the_sampled_ones(exported):
    calls, tables, node_calls = exported
    trajectories = tables["trajectories"]
    assert trajectories
    for row in trajectories:
        steps = [calls[node_calls[node]] for node in row["node_ids"][1:]]
        last = steps[-1]
        assert row["prompt_token_ids"] == steps[0]["prompt_token_ids"]
        assert (
            row["prompt_token_ids"] + row["completion_token_ids"]
            == last["prompt_token_ids"] + last["completion_token_ids"]
        )
        for span, call in zip(row["step_token_spans"], steps):
            start, end = span["token_start"], span["token_end"]
            kept = end - start
            assert kept > 0 and row["completion_token_ids"][start:end] == call["completion_token_ids"][:kept]
            assert row["loss_mask"][start:end] == [1] * kept
            assert row["behaviour_logprobs"][start:end] == pytest.approx(call["completion_logprobs"][:kept], abs=1e-5)
        assert sum(row["loss_mask"]) + row["dropped_sampled_tokens"] == sum(c["completion_tokens"] for c in steps)
    first_steps = {row["node_ids"][1] for row in trajectories}
    root_prompts = {tuple(calls[node_calls[node]]["prompt_token_ids"]) for node in first_steps}
    for table in ("grpo_prompts", "verl_prompts"):
        [prompt] = tables[table]
        assert root_prompts == {tuple(prompt["prompt_token_ids"])}


def test_the_tree_advantage_features_are_the_exported_ids(exported, embedded_model):
    from transformers import AutoTokenizer

    from ragfactory.tasks.training.tree_advantage import trajectory_features

    _, tables, _ = exported
    rows = tables["trajectories"]
    features = trajectory_features(rows, AutoTokenizer.from_pretrained(embedded_model), max_length=4096)
    sampled = [row for row in rows if row["is_sampled"]]
    assert [f["input_ids"] for f in features] == [r["prompt_token_ids"] + r["completion_token_ids"] for r in sampled]
    assert [f["loss_mask"] for f in features] == [[0] * len(r["prompt_token_ids"]) + r["loss_mask"] for r in sampled]
