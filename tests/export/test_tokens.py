"""Token-exact trajectories (tasks/llm/splice.py): a two-turn path spliced by hand, the
cases that leave the token columns null, the tree-advantage trainer's features taken from the
ids, and a scripted TreePS tree whose engine reports token ids."""

from __future__ import annotations

import asyncio

import pytest

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.splice import calls_by_id, no_tokens, prompt_tokens, trajectory_tokens
from ragfactory.tasks.search.treeps.expansion import TreePSConfig, expand_question
from ragfactory.tasks.search.treeps.trajectories import trajectory_rows
from ragfactory.tasks.training.tree_advantage import token_row
from ragfactory.tasks.valuation.node_values import assign_node_values
from ragfactory.warehouse.store import conform
from tests.fakes import FunctionRetriever, TokenScriptedBackend
from tests.search.treeps.treeps_scenario import QUESTIONS, own_passages


def _call(cid, prompt, sampled, logprobs, tokenizer="tok-a"):
    return {
        "call_id": cid,
        "prompt_token_ids": prompt,
        "completion_token_ids": sampled,
        "completion_logprobs": logprobs,
        "tokenizer_fingerprint": tokenizer,
    }


# Turn 1 samples [10, 11, 12]; its text was cut before 12 (a stop string's tail), so turn 2's
# prompt holds P1 + [10, 11] + [99 (end of turn), 5, 6 (the observation)]. Turn 2 samples
# [20, 21, 0] and ends the path.
FIRST = _call("c1", [1, 2, 3], [10, 11, 12], [-0.5, -0.25, -1.0])
SECOND = _call("c2", [1, 2, 3, 10, 11, 99, 5, 6], [20, 21, 0], [-0.125, -2.0, -0.75])
CALLS = calls_by_id([FIRST, SECOND])


def test_two_turns_splice_into_the_last_calls_context_with_a_hand_worked_mask():
    tokens = trajectory_tokens(["c1", "c2"], CALLS)
    assert tokens == {
        "prompt_token_ids": [1, 2, 3],
        "completion_token_ids": [10, 11, 99, 5, 6, 20, 21, 0],
        "loss_mask": [1, 1, 0, 0, 0, 1, 1, 1],
        "behaviour_logprobs": [-0.5, -0.25, None, None, None, -0.125, -2.0, -0.75],
        "step_token_spans": [{"token_start": 0, "token_end": 2}, {"token_start": 5, "token_end": 8}],
        "dropped_sampled_tokens": 1,
        "tokenizer_fingerprint": "tok-a",
    }
    # what the trainer sees is exactly the last call's prompt and sample
    assert tokens["prompt_token_ids"] + tokens["completion_token_ids"] == SECOND["prompt_token_ids"] + [20, 21, 0]


@pytest.mark.parametrize(
    "calls, path",
    [
        (calls_by_id([FIRST, {**SECOND, "prompt_token_ids": [1, 2, 4, 10, 11]}]), ["c1", "c2"]),  # re-rendered turn 1
        (calls_by_id([FIRST, {**SECOND, "completion_token_ids": None}]), ["c1", "c2"]),  # a row before schema 9
        (CALLS, ["c1", "gone"]),  # a call the run does not hold
        (calls_by_id([FIRST, {**SECOND, "tokenizer_fingerprint": "tok-b"}]), ["c1", "c2"]),  # two tokenizers
    ],
)
def test_paths_that_cannot_be_spliced_have_null_token_columns(calls, path):
    assert trajectory_tokens(path, calls) == no_tokens()


def test_an_engine_without_logprobs_keeps_the_ids_and_leaves_logprobs_null():
    tokens = trajectory_tokens(["c1", "c2"], calls_by_id([FIRST, {**SECOND, "completion_logprobs": None}]))
    assert tokens["behaviour_logprobs"] is None and tokens["loss_mask"] == [1, 1, 0, 0, 0, 1, 1, 1]


def test_a_prompts_ids_come_from_the_first_call_that_recorded_them():
    calls = calls_by_id([{**FIRST, "prompt_token_ids": None}, SECOND])
    assert prompt_tokens([None, "c1", "c2"], calls) == {
        "prompt_token_ids": SECOND["prompt_token_ids"],
        "tokenizer_fingerprint": "tok-a",
    }
    assert prompt_tokens(["c1"], calls) == {"prompt_token_ids": None, "tokenizer_fingerprint": None}


def test_the_tree_advantage_features_are_the_rows_own_ids():
    row = {**trajectory_tokens(["c1", "c2"], CALLS), "step_spans": [{"advantage": 0.5}, {"advantage": -1.0}]}
    assert token_row(row, max_length=64) == {
        "input_ids": [1, 2, 3, 10, 11, 99, 5, 6, 20, 21, 0],
        "advantages": [0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0, -1.0, -1.0, -1.0],
        "loss_mask": [0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1],
    }
    # whole steps only: the second ends at token 11, past 7
    assert token_row(row, max_length=7) == {
        "input_ids": [1, 2, 3, 10, 11],
        "advantages": [0.0, 0.0, 0.0, 0.5, 0.5],
        "loss_mask": [0, 0, 0, 1, 1],
    }
    assert token_row(row, max_length=4) is None


def _search_then_answer(request, sample):
    """Search at the root, answer below it (the stop string ate the closing search tag)."""
    if len(request.messages) == 1:
        return f"<reason>Look.</reason> <search> capital {sample} "
    return "<answer> Paris </answer>"


def test_a_scripted_trees_trajectories_carry_the_ids_the_engine_reported():
    backend = TokenScriptedBackend(_search_then_answer)
    batcher = Batcher(backend)
    config = TreePSConfig(n=2, depth=2)  # two searches, each answered once: two paths

    async def run():
        return await batcher.run_all(
            [expand_question(QUESTIONS[0], batcher, FunctionRetriever(own_passages), config, "run", 0)], max_in_flight=1
        )

    [tree] = asyncio.run(run())
    assign_node_values(tree.nodes)
    calls = calls_by_id(conform("llm_calls", batcher.cache.rows()).to_pylist())  # as the export reads them
    rows = trajectory_rows(tree.node_rows(), calls=calls)
    # the search's end of sequence is not in the answer's prompt, which closes the search tag instead
    assert len(rows) == 2 and all(r["dropped_sampled_tokens"] == 1 for r in rows)
    for row in rows:
        search, answer = (calls[cid] for cid in _call_ids(tree, row["node_ids"][1:]))
        ids, mask = row["completion_token_ids"], row["loss_mask"]
        assert row["prompt_token_ids"] + ids == answer["prompt_token_ids"] + answer["completion_token_ids"]
        first, second = row["step_token_spans"]
        assert ids[first["token_start"] : first["token_end"]] == search["completion_token_ids"][:-1]
        assert ids[second["token_start"] :] == answer["completion_token_ids"]
        assert mask == [1] * first["token_end"] + [0] * (second["token_start"] - first["token_end"]) + [1] * len(
            answer["completion_token_ids"]
        )
        sampled = [lp for lp, m in zip(row["behaviour_logprobs"], mask) if m]
        assert sampled == search["completion_logprobs"][:-1] + answer["completion_logprobs"]
    conform("trajectories", [{**r, "run_id": "run"} for r in rows])  # the schema takes them


def _call_ids(tree, node_ids):
    by_id = {row["node_id"]: row for row in tree.node_rows()}
    return [by_id[n]["llm_call_id"] for n in node_ids]
