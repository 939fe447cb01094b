"""Pruned against "No Pruning Search" (DecEx-RAG, §4.1 and Table 2) on one scripted policy.

The policy always votes to terminate with "Paris" (F1 1), proposes sub-questions, self-answers
"France" and queries; rollouts answer "Paris" except from a self-answer state, where they say
"France" in one rollout of two (value 1/2 < 0.75: retrieve). Pruned, the vote ends the tree at
the root. Without pruning both options of both decisions are kept: the answer and the best
sub-question under every state, and under that sub-question the best self-answer and the best
sub-query, so states double per layer: 1, 2, 4 with T_max = 2.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from ragfactory.tasks.export.sft import SftConfig
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.types import Request
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.decex.expansion import DecExConfig, expand_question
from ragfactory.tasks.search.decex.exports import preference_pairs, sft_examples
from tests.fakes import FixedRetriever, ScriptedBackend

QUESTION = {"question_id": "q1", "question": "What is the capital of France?", "golden_answers": ["Paris"]}
CONFIG = DecExConfig(k=2, n_rollouts=2, t_max=2, termination_samples=3, rollout_max_turns=2)


def reply(request: Request, sample: int) -> str:
    prompt = request.messages[-1].content
    if "Please judge based on the available information" in prompt:
        return "<reasoning>It is known.</reasoning> <answer>Paris</answer>"
    if "break down the original question" in prompt:
        return f"Think. <question>Which city {sample}?</question>"
    if prompt.startswith("We will provide you with a question, please answer"):
        return f"<answer>France {sample}</answer>"
    if "Please generate a query for search engines" in prompt:
        return f"capital query {sample}"
    if prompt.split("### Your Output")[0].rstrip().endswith(("Answer: France 0", "Answer: France 1")):
        return "<answer> France </answer>" if sample == 0 else "<answer> Paris </answer>"
    return "<answer> Paris </answer>"


def expand(config):
    batcher = Batcher(ScriptedBackend(reply))
    retriever = FixedRetriever(default=[Hit("p1", "Paris", "Paris is the capital of France.", 1.0)])

    async def main():
        job = lambda: expand_question(QUESTION, batcher, retriever, config, "r", 5)  # noqa: E731
        return (await batcher.run_all([job], max_in_flight=1))[0]

    return asyncio.run(main())


@pytest.fixture(scope="module")
def trees():
    return expand(CONFIG), expand(replace(CONFIG, no_pruning=True))


def kept(tree, kinds):
    return sorted(r["path"] for r in tree.node_rows() if r["kind"] in kinds and r["is_selected"])


def test_pruned_tree_stops_on_the_termination_vote(trees):
    pruned, _ = trees
    assert pruned.strategy == "decex"
    assert {r["kind"] for r in pruned.node_rows()} == {"question", "termination", "answer"}
    assert kept(pruned, {"answer"}) == ["q/a0"]


def test_no_pruning_keeps_both_options_of_both_decisions(trees):
    _, full = trees
    assert full.strategy == "decex_no_pruning"
    states = kept(full, {"self_answer", "sub_query"})
    assert states == ["q/s0/e0", "q/s0/e0/s0/e0", "q/s0/e0/s0/w0", "q/s0/w0", "q/s0/w0/s0/e0", "q/s0/w0/s0/w0"]
    assert kept(full, {"answer"}) == sorted(["q/a0"] + [f"{s}/a0" for s in states])
    sub_questions = [r for r in full.node_rows() if r["kind"] == "sub_question"]
    decisions = {json.loads(r["parsed"]).get("retrieval_decision") for r in sub_questions}
    assert decisions == {"both", None}  # None: pruned sub-questions are never decided on
    rows = {r["path"]: r for r in full.node_rows()}
    assert rows["q/s0/w0"]["value"] == 0.5 and rows["q/s0/e0"]["value"] == 1.0


def test_kept_options_pair_as_decisions(trees):
    _, full = trees
    ids = {r["node_id"]: r["path"] for r in full.node_rows()}
    pairs = [
        (p["decision"], ids[p["chosen_node_id"]], ids[p["rejected_node_id"]], p["gap"])
        for p in preference_pairs(full.node_rows(), [QUESTION])
    ]
    assert ("decision", "q/s0/e0", "q/s0/w0", 0.5) in pairs  # both kept: the better one is chosen
    assert all(label == "decision" for label, *_ in pairs)  # every execution sibling ties or duplicates
    assert not any(c == "q/a0" for _, c, *_ in pairs)  # answer 1 vs sub-question 1: no gap


@pytest.mark.parametrize("prefer,retrievals,n_examples", [("most_retrieval", 2, 3), ("least_retrieval", 0, 1)])
def test_sft_chain_tie_break_by_retrievals(trees, prefer, retrievals, n_examples):
    _, full = trees
    examples = sft_examples(full.node_rows(), [QUESTION], SftConfig(prefer=prefer))
    assert len(examples) == n_examples
    last = examples[-1]["messages"][0]["content"]
    assert last.count("<information>\nDoc 1") == retrievals
    assert examples[-1]["messages"][1]["content"] == "It is known.\n<answer> Paris </answer>"
