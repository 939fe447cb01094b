"""APEX exports from the hand-worked Jaws runs (tests/search/apex/apex_scenario.py), and the SQL view.

Both executed runs end in "Leah Adler" (EM 1), so both are SFT data. The p1 run makes 11 calls,
one of them the unreadable sufficiency check (left out): 10 examples; the gold run makes 9: 19 in
all. The planner's GRPO prompt carries the gold rewrite as JSON; its sampled plans average SEPR
(1/2 + 1 + 0) / 3 = 1/2.
"""

from __future__ import annotations

from collections import Counter
from functools import partial

import pytest

from ragfactory.tasks.search.apex.exports import ApexExportConfig, executor_sft_examples, planner_grpo_prompts
from ragfactory.tasks.search.apex.training import sepr_reward
from ragfactory.warehouse.catalog import query, refresh_catalog
from ragfactory.warehouse.store import conform
from tests.search.apex.apex_scenario import PLANS, QUESTION, apex_reply, run, scorer


@pytest.fixture(scope="module")
def jaws():
    return run()


def sent_prompts(backend) -> list[str]:
    return [r.messages[0].content for batch in backend.batches for r in batch]


def test_sft_examples_replay_the_prompts_each_call_answered(jaws):
    result, backend, _ = jaws
    examples = executor_sft_examples(result.nodes, [QUESTION])
    assert len(examples) == 19
    prompts = Counter(sent_prompts(backend))
    nodes = {row["node_id"]: row for row in result.nodes}
    for example in examples:
        user, assistant = example["messages"]
        assert prompts[user["content"]] >= 1, user["content"][:200]
        node = nodes[example["node_ids"][-1]]
        assert assistant["content"].startswith(node["text"].rstrip())
        assert assistant["content"].endswith(("</decision>", "</query>", "</answer>"))
        assert not node["is_format_error"]
        chain = [nodes[i] for i in example["node_ids"]]
        assert chain[0]["kind"] == "question"
        assert all(b["parent_id"] == a["node_id"] for a, b in zip(chain, chain[1:]))
    calls = Counter(nodes[e["node_ids"][-1]]["kind"] for e in examples)
    assert calls == {"retrieval": 8, "sub_query": 5, "evidence": 3, "self_answer": 1, "answer": 2}
    assert conform("sft_examples", examples).num_rows == 19
    assert len({e["example_id"] for e in examples}) == 19 and {e["strategy"] for e in examples} == {"apex"}


def test_wrong_runs_make_no_examples():
    def wrong(request, sample):
        if request.messages[0].content.startswith("Answer the original question"):
            return "<answer>Marcia Lucas</answer>"
        return apex_reply(request, sample)

    result, *_ = run(reply=wrong)
    assert executor_sft_examples(result.nodes, [QUESTION]) == []
    lenient = ApexExportConfig(metric="f1", min_score=0.0)
    assert len(executor_sft_examples(result.nodes, [QUESTION], lenient)) == 19


def test_call_types_can_be_chosen(jaws):
    config = ApexExportConfig(calls=("query_first", "query_next"))
    examples = executor_sft_examples(jaws[0].nodes, [QUESTION], config)
    mother = [
        "Need his mother. <query>Steven Spielberg mother</query>",
        "Try his parents. <query>Spielberg parents</query>",
    ]
    outputs = [e["messages"][1]["content"] for e in examples]
    assert outputs == mother + ["<query>Jaws director</query>"] + mother
    with pytest.raises(ValueError, match="unknown"):
        ApexExportConfig(calls=("plan",))


def test_grpo_prompt_feeds_the_sepr_reward(jaws):
    result, backend, _ = jaws
    [row] = planner_grpo_prompts(result.plans, result.plan_scores, [QUESTION])
    assert (row["task"], row["strategy"], row["golden_answers"]) == ("plan", "apex", ["Leah Adler"])
    assert row["prompt"][0]["content"] in sent_prompts(backend)
    planner_ids = {p["plan_id"] for p in result.plans if p["source"] == "planner"}
    assert set(row["node_ids"]) == planner_ids
    reward = partial(sepr_reward, scorer=scorer())
    rewards = reward([row["prompt"]] * 3, PLANS, gold_plan=[row["gold_plan"]] * 3)
    assert rewards == pytest.approx([0.5, 1.0, 0.0])
    assert conform("grpo_prompts", [row]).num_rows == 1


@pytest.mark.parametrize("max_mean_f1, n_rows", [(1.0, 1), (0.5, 1), (0.4, 0)])
def test_grpo_prompts_can_skip_solved_questions(jaws, max_mean_f1, n_rows):
    result = jaws[0]
    config = ApexExportConfig(max_mean_f1=max_mean_f1)
    assert len(planner_grpo_prompts(result.plans, result.plan_scores, [QUESTION], config)) == n_rows


def test_questions_without_gold_plan_make_no_grpo_prompt(jaws):
    plans = [p for p in jaws[0].plans if p["source"] != "gold"]
    assert planner_grpo_prompts(plans, jaws[0].plan_scores, [QUESTION]) == []


def test_warehouse_round_trip_and_apex_plans_view(jaws, warehouse):
    result = jaws[0]
    for table in ("plans", "plan_scores", "nodes"):
        warehouse.write(table, getattr(result, table), "apex-0000")
    nodes = warehouse.read("nodes").to_pylist()
    assert len(executor_sft_examples(nodes, [QUESTION])) == 19
    refresh_catalog(warehouse)
    rows = query(warehouse, "select * from apex_plans where run_id = $run", {"run": "run-1"}).to_pylist()
    view = {(r["source"], tuple(r["sub_questions"])): r for r in rows}
    best = view[("planner", ("Who directed Jaws?", "Who is the mother of #1?"))]
    assert (best["f1"], best["n_matched"], best["is_executed"], best["final_answer"], best["answer_em"]) == (
        1.0,
        2,
        True,
        "Leah Adler",
        1.0,
    )
    assert (best["n_sub_questions"], best["n_queries"], best["n_execution_format_errors"]) == (2, 3, 1)
    gold = view[("gold", ("Who is the director of Jaws?", "Who is the mother of #1?"))]
    assert (gold["f1"], gold["is_executed"], gold["final_answer"]) == (None, True, "Leah Adler")
    malformed = view[("planner", ())]
    found = (malformed["is_format_error"], malformed["f1"], malformed["is_executed"])
    assert found == (True, 0.0, False) and malformed["n_sub_questions"] == 0
    assert len(rows) == 4
