"""TreePS-RAG tree construction with a scripted policy (§2.2, Algorithm 1 Phase 1).

The policies and the retriever are in tests/search/treeps/treeps_scenario.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pyarrow as pa
import pytest

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.seeds import derive_seed
from ragfactory.tasks.search.shard import expand_shard
from ragfactory.tasks.search.treeps.expansion import TreePSConfig
from ragfactory.tasks.search.treeps.steps import STEP_STOP
from ragfactory.tasks.valuation.node_values import estimate_node_values
from tests.fakes import FunctionRetriever, ScriptedBackend
from tests.search.treeps.treeps_scenario import (
    QUESTIONS,
    build,
    distinct_search,
    mixed,
    own_passages,
    path_of,
    two_groups,
)


def layer_counts(tree, depth):
    rows = [r for r in tree.node_rows() if r["depth"] == depth]
    return len(rows), sum(r["is_selected"] and not r["is_leaf"] for r in rows)


def test_layer_sizes_follow_eq2_and_depth_d_children_are_forced_leaves():
    trees, backend, _ = build(distinct_search)
    tree = trees[0]
    # B_d = 8, 4, 2, 1 for |M(d-1)| = 1, 2, 4, 8: about N = 8 children per layer (Table 3)
    assert [layer_counts(tree, d) for d in (1, 2, 3)] == [(8, 2), (8, 4), (8, 8)]
    depth4 = [r for r in tree.node_rows() if r["depth"] == 4]
    assert len(depth4) == 8 and all(r["is_leaf"] and r["is_selected"] for r in depth4)
    assert all(r["parsed"].count('"forced_leaf": true') for r in depth4)
    assert {r["reward"] for r in depth4} == {0.0} and len(tree.rollouts) == 8
    branching = Counter((r["depth"], r["parsed"].split('"branching": ')[1].split(",")[0]) for r in tree.node_rows()[1:])
    assert branching == {(1, "8"): 8, (2, "4"): 8, (3, "2"): 8, (4, "1"): 8}


def test_one_engine_call_per_layer_across_questions():
    _, backend, retriever = build(distinct_search)
    assert [len(batch) for batch in backend.batches] == [2, 4, 8, 16]  # parents of both questions
    assert [sum(r.sampling.n for r in batch) for batch in backend.batches] == [16, 16, 16, 16]
    assert sorted(len(b) for b in retriever.batches) == [8] * 8  # one call per question and layer


def test_requests_carry_seed_stop_and_sampling_of_the_parent():
    trees, backend, _ = build(distinct_search, run_seed=5)
    paths = {r["path"] for t in trees for r in t.node_rows()}
    for batch in backend.batches:
        for request in batch:
            question_id, path = dict(request.tags)["question_id"], path_of(request)
            assert path in paths
            assert request.sampling.seed == derive_seed(5, question_id, f"{path}/c")
            assert request.sampling.stop == STEP_STOP
            assert (request.sampling.temperature, request.sampling.max_tokens) == (1.0, 512)


def test_kept_states_hold_the_steps_and_observations_so_far():
    _, backend, _ = build(distinct_search)
    request = backend.batches[2][0]  # a depth-2 parent expanding into depth 3
    roles = [m.role for m in request.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert request.messages[1].content.endswith("</search>")
    assert request.messages[2].content.startswith("<information>Doc 1(Title: T) text 0\n")


def test_answers_wrong_answers_and_malformed_steps_are_leaves():
    trees, _, _ = build(mixed)
    rows = {r["path"]: r for r in trees[0].node_rows()}
    assert [layer_counts(trees[0], d) for d in (1, 2, 3)] == [(8, 2), (8, 2), (8, 2)]
    leaves = [r for r in rows.values() if r["is_leaf"]]
    assert len(leaves) == 6 + 6 + 6 + 8
    assert sum(r["reward"] for r in leaves) == 8  # two right answers per layer
    malformed = [r for r in leaves if r["is_format_error"]]
    assert len(malformed) == 8 and all(p.rsplit("/", 1)[1].startswith("f") for p in (r["path"] for r in malformed))
    assert {r["format_error"] for r in malformed} == {"missing <search> or <answer>"}
    assert all(r["reward"] == 0.0 and r["kind"] == "answer" for r in malformed)
    assert rows["q/a0"]["reward"] == 1.0 and rows["q/a1"]["reward"] == 0.0
    assert rows["q"]["value"] == pytest.approx(8 / 26)
    assert '"reasoning": "Known."' in rows["q/a0"]["parsed"]


def test_an_empty_output_still_lets_the_question_finish():
    trees, _, _ = build(lambda request, sample: "" if sample else "<answer> Paris </answer>")
    rows = trees[0].node_rows()
    assert len(rows) == 9 and sum(r["format_error"] == "empty output" for r in rows) == 7
    assert rows[0]["value"] == pytest.approx(1 / 8)


def test_similarity_pruning_keeps_one_child_per_cluster_of_identical_passages():
    trees, _, _ = build(distinct_search, hits=two_groups)
    rows = {r["path"]: r for r in trees[0].node_rows()}
    layer1 = [rows[f"q/s{i}"] for i in range(8)]
    assert [r["is_selected"] for r in layer1] == [True, True] + [False] * 6
    clusters = [r["parsed"].split('"cluster": ')[1].split(",")[0] for r in layer1]
    assert len(set(clusters[0::2])) == 1 and len(set(clusters[1::2])) == 1
    assert clusters[0] != clusters[1]
    kept_sets = [tuple(r["passage_ids"]) for r in layer1 if r["is_selected"]]
    assert len(set(kept_sets)) == 2


def kept_samples(trees) -> set[tuple[int, ...]]:
    return {tuple(int(r["path"][3:]) for r in t.node_rows() if r["depth"] == 1 and r["is_selected"]) for t in trees}


def test_random_pruning_keeps_n_retain_children_reproducibly():
    config = TreePSConfig(pruning="random")
    trees, _, _ = build(distinct_search, hits=two_groups, config=config)
    again, _, _ = build(distinct_search, hits=two_groups, config=config)
    assert [t.node_rows() for t in trees] == [t.node_rows() for t in again]
    assert [layer_counts(trees[0], d) for d in (1, 2, 3)] == [(8, 2), (8, 4), (8, 8)]
    assert all('"cluster"' not in r["parsed"] for r in trees[0].node_rows())
    draws = set()
    for seed in range(6):
        draws |= kept_samples(build(distinct_search, hits=two_groups, config=config, run_seed=seed)[0])
    assert len(draws) > 1 and all(len(d) == 2 for d in draws)


def test_answers_at_depth_one_end_the_tree_without_retrieval():
    trees, backend, retriever = build(lambda request, sample: "<answer> Paris </answer>")
    assert len(trees[0].nodes) == 9 and backend.calls == 1 and retriever.batches == []
    assert trees[0].nodes[0].value == 1.0 and trees[0].nodes[1].advantage == 0.0


def test_fixed_branching_with_full_retention_gives_independent_trajectories():
    config = TreePSConfig(branching=(8, 1, 1, 1), n_retain=8)
    trees, _, _ = build(distinct_search, config=config)
    rows = trees[0].node_rows()
    children = Counter(r["parent_id"] for r in rows if r["parent_id"])
    assert len(rows) == 33 and children[rows[0]["node_id"]] == 8
    assert set(children.values()) == {8, 1} and len(trees[0].rollouts) == 8


def test_expansion_leaves_the_values_to_the_valuation_stage():
    bare = build(mixed, valued=False)[0][0].node_rows()
    assert {(r["visits"], r["value"], r["advantage"]) for r in bare} == {(None, None, None)}
    table = pa.Table.from_pylist(bare, schema=table_spec("nodes").schema)
    assert estimate_node_values(table).to_pylist() == build(mixed)[0][0].node_rows()


def test_rollout_rows_are_the_leaves_trajectories():
    trees, _, _ = build(mixed)
    tree = trees[0]
    rows = {r["node_id"]: r for r in tree.node_rows()}
    rollouts = tree.rollout_rows()
    assert len(rollouts) == sum(r["is_leaf"] for r in rows.values())
    deep = next(r for r in rollouts if r["n_steps"] == 4 and r["final_answer"] == "Paris")
    assert deep["em"] == 1.0 and deep["text"].count("<information>") == 3
    assert deep["node_id"] == tree.nodes[0].node_id and len(deep["llm_call_ids"]) == 4
    pa.Table.from_pylist(rollouts, schema=table_spec("rollouts").schema)


def test_the_shard_runner_knows_the_strategy():
    backend = ScriptedBackend(mixed)
    batcher = Batcher(backend)
    rows = asyncio.run(
        expand_shard(
            "treeps",
            QUESTIONS[::-1],
            batcher,
            FunctionRetriever(own_passages),
            TreePSConfig(depth=2),
            "run",
            0,
            max_in_flight=2,
        )
    )
    assert [r["question_id"] for r in rows.nodes][:1] == ["q0"]
    assert {r["strategy"] for r in rows.nodes} == {"treeps"}
    pa.Table.from_pylist(rows.nodes, schema=table_spec("nodes").schema)


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"n": 0}, "TreePSConfig.n must be >= 1"),
        ({"pruning": "greedy"}, "TreePSConfig.pruning"),
        ({"linkage": "ward"}, "TreePSConfig.linkage"),
        ({"branching": (8, 4)}, "needs 4 factors"),
        ({"metric": "bleu"}, "TreePSConfig.metric"),
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"prompt": "decex_rollout"}, "unknown TreePS prompt"),
    ],
)
def test_config_refuses_bad_values(fields, message):
    with pytest.raises(ValueError, match=message):
        TreePSConfig(**fields)
