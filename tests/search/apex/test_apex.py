"""APEX-Searcher on the hand-worked Jaws question (tests/search/apex/apex_scenario.py; APEX-Searcher, §2.2-2.4).

G = 3 planner samples, H = 3, top 2 documents, the best plan and the gold plan executed.

Plans and SEPR (tau 0.7) against the gold rewrite ["Who is the director of Jaws?",
"Who is the mother of #1?"]:
  p0 ["When was Jaws released?", "Who is the mother of #1?"]: step 2 matches (1.0) -> P = R = F1 = 1/2
  p1 ["Who directed Jaws?", "Who is the mother of #1?"]: both match (0.8, 1.0) -> 1    executed
  p2 no numbered line: format error -> 0
Run of p1 (q/p1):
  s1 "Who directed Jaws?": sufficiency unreadable -> format error, default retrieve; e1 "Jaws
     director" -> p-jaws, p-bio; d2 stop; v "Steven Spielberg" from both documents.
  s2 "Who is the mother of Steven Spielberg?" (#1 resolved): retrieve; e1 -> p-leah, p-jaws;
     d2 continue; e2 "Spielberg parents" asks 2 + 2 documents, p-leah is filtered -> p-arnold;
     d3 stop; v "Leah Adler".  a "Leah Adler": EM 1.
Run of the gold plan (q/g): s1 answered from knowledge (w); s2 as above; a "Leah Adler".
"""

from __future__ import annotations

import json

import pytest

from ragfactory.tasks.search.apex.expansion import ApexConfig
from ragfactory.warehouse.store import conform
from tests.search.apex.apex_scenario import CONFIG, QUESTION, apex_reply, run

P1 = "q/p1"
S2 = f"{P1}/s1/c/e1/d2/v/s2"
EXPECTED_RUN = {  # path below p1: (kind, call, decision or query or answer, passage ids)
    "s1": ("sub_question", None, "Who directed Jaws?", []),
    "s1/c": ("retrieval", "sufficiency", "retrieve", []),
    "s1/c/e1": ("sub_query", "query_first", "Jaws director", ["p-jaws", "p-bio"]),
    "s1/c/e1/d2": ("retrieval", "continue", "stop", []),
    "s1/c/e1/d2/v": ("evidence", "sub_answer", "Steven Spielberg", ["p-jaws", "p-bio"]),
    "s1/c/e1/d2/v/s2": ("sub_question", None, "Who is the mother of Steven Spielberg?", []),
    "s1/c/e1/d2/v/s2/c": ("retrieval", "sufficiency", "retrieve", []),
    "s1/c/e1/d2/v/s2/c/e1": ("sub_query", "query_first", "Steven Spielberg mother", ["p-leah", "p-jaws"]),
    "s1/c/e1/d2/v/s2/c/e1/d2": ("retrieval", "continue", "continue", []),
    "s1/c/e1/d2/v/s2/c/e1/d2/e2": ("sub_query", "query_next", "Spielberg parents", ["p-arnold"]),
    "s1/c/e1/d2/v/s2/c/e1/d2/e2/d3": ("retrieval", "continue", "stop", []),
    "s1/c/e1/d2/v/s2/c/e1/d2/e2/d3/v": ("evidence", "sub_answer", "Leah Adler", ["p-leah", "p-jaws", "p-arnold"]),
    "s1/c/e1/d2/v/s2/c/e1/d2/e2/d3/v/a": ("answer", "synthesis", "Leah Adler", []),
}


@pytest.fixture(scope="module")
def jaws():
    return run()


def by_path(result):
    return {row["path"]: {**row, "parsed": json.loads(row["parsed"])} for row in result.nodes}


def _said(row):
    parsed = row["parsed"]
    if row["kind"] == "sub_question":
        return parsed["resolved"]
    return parsed.get("decision") or parsed.get("query") or parsed.get("answer")


def test_plans_rows(jaws):
    result, *_ = jaws
    plans = {row["plan_id"]: row for row in result.plans}
    rows = by_path(result)
    expected = {  # path: (source, questions, format error)
        "q/p0": ("planner", ["When was Jaws released?", "Who is the mother of #1?"], None),
        "q/p1": ("planner", ["Who directed Jaws?", "Who is the mother of #1?"], None),
        "q/p2": ("planner", [], "no numbered sub-questions"),
        "q/g": ("gold", ["Who is the director of Jaws?", "Who is the mother of #1?"], None),
    }
    for path, (source, questions, error) in expected.items():
        plan = plans[rows[path]["node_id"]]
        found = (plan["source"], [s["question"] for s in plan["steps"]], plan["format_error"])
        assert found == (source, questions, error)
        assert plan["is_format_error"] == (error is not None) and plan["text"] == rows[path]["text"]
    gold = plans[rows["q/g"]["node_id"]]
    originals = [(s["original"], s["depends_on"]) for s in gold["steps"]]
    assert originals == [("Jaws >> director", []), ("#1 >> mother", [1])]
    assert gold["llm_call_id"] is None
    assert all(plans[rows[f"q/p{i}"]["node_id"]]["llm_call_id"] for i in range(3))


def test_plan_scores_rows(jaws):
    result, *_ = jaws
    rows = by_path(result)
    scores = {row["plan_id"]: row for row in result.plan_scores}
    assert set(scores) == {rows[f"q/p{i}"]["node_id"] for i in range(3)}  # the gold plan is not scored
    expected = {"q/p0": (0.5, [(2, 2, 1.0)]), "q/p1": (1.0, [(1, 1, 0.8), (2, 2, 1.0)]), "q/p2": (0.0, [])}
    for path, (f1, matched) in expected.items():
        score = scores[rows[path]["node_id"]]
        assert score["f1"] == pytest.approx(f1) and rows[path]["reward"] == pytest.approx(f1)
        assert [(m["predicted"], m["gold"], m["similarity"]) for m in score["matched"]] == [
            (p, g, pytest.approx(s)) for p, g, s in matched
        ]
        assert score["gold_plan_id"] == rows["q/g"]["node_id"] and score["tau"] == 0.7
        assert score["embedder"] == "table-embedder"


def test_best_plan_run_follows_algorithm_2(jaws):
    result, *_ = jaws
    rows = by_path(result)
    run_rows = {p[len(P1) + 1 :]: r for p, r in rows.items() if p.startswith(P1 + "/")}
    assert run_rows.keys() == EXPECTED_RUN.keys()
    for path, (kind, call, said, passages) in EXPECTED_RUN.items():
        row = run_rows[path]
        found = (row["kind"], row["parsed"].get("call"), _said(row), row["passage_ids"])
        assert found == (kind, call, said, passages), path
        assert row["is_selected"]
    check = run_rows["s1/c"]
    assert check["is_format_error"] and check["format_error"] == "missing <decision>"
    answer = run_rows["s1/c/e1/d2/v/s2/c/e1/d2/e2/d3/v/a"]
    assert (answer["reward"], answer["value"], answer["is_leaf"]) == (1.0, 1.0, True)
    assert answer["parsed"]["confidence"] == 1.0 and answer["parsed"]["em"] == 1.0


def test_gold_plan_run_answers_its_first_step_from_knowledge(jaws):
    result, *_ = jaws
    rows = by_path(result)
    gold_run = [(p, r["kind"], _said(r)) for p, r in rows.items() if p.startswith("q/g/")]
    assert gold_run[:4] == [
        ("q/g/s1", "sub_question", "Who is the director of Jaws?"),
        ("q/g/s1/c", "retrieval", "answer"),
        ("q/g/s1/c/w", "self_answer", "Steven Spielberg"),
        ("q/g/s1/c/w/s2", "sub_question", "Who is the mother of Steven Spielberg?"),
    ]
    assert gold_run[-1][1:] == ("answer", "Leah Adler")
    assert not any(p.startswith("q/p0/") or p.startswith("q/p2/") for p in rows)  # not executed
    assert [rows[f"q/p{i}"]["is_selected"] for i in range(3)] == [False, True, False]


def test_later_hops_see_earlier_queries_and_only_new_documents(jaws):
    _, backend, retriever = jaws
    prompts = [r.messages[0].content for batch in backend.batches for r in batch]
    next_query = [p for p in prompts if "Write a different query" in p]
    assert len(next_query) == 2  # one per run
    assert "### Previous Queries\n1. Steven Spielberg mother\n" in next_query[0]
    assert 'Doc 1: "Leah Adler"' in next_query[0]
    continues = [p for p in prompts if "retrieval hops have been made" in p]
    assert sorted(p.partition("sub-question. ")[2][:1] for p in continues) == ["1", "1", "1", "2", "2"]
    assert retriever.batches.count(["Spielberg parents"]) == 2


def test_prompts_carry_resolved_references_and_knowledge(jaws):
    _, backend, _ = jaws
    prompts = [r.messages[0].content for batch in backend.batches for r in batch]
    synthesis = [p for p in prompts if p.startswith("Answer the original question")]
    assert len(synthesis) == 2
    knowledge = (
        "Sub-question 1: Who directed Jaws?\nAnswer 1: Steven Spielberg\n"
        "Sub-question 2: Who is the mother of Steven Spielberg?\nAnswer 2: Leah Adler\n\n"
    )
    assert sum(knowledge in p for p in synthesis) == 1
    requests = [r for batch in backend.batches for r in batch]
    planner = [r for r in requests if r.messages[0].content.startswith("You are a planning")]
    assert len(planner) == 1 and planner[0].sampling.n == 3 and planner[0].sampling.stop == ("</plan>",)
    assert "at most 5 sub-questions" in planner[0].messages[0].content


def test_rows_fit_their_tables(jaws):
    result, *_ = jaws
    for table in ("plans", "plan_scores", "nodes"):
        assert conform(table, getattr(result, table)).num_rows == len(getattr(result, table)) > 0
    assert result.rollouts == []
    assert {row["strategy"] for row in result.nodes} == {"apex"}


def test_a_rerun_writes_identical_rows(jaws):
    again, *_ = run()
    assert again.nodes == jaws[0].nodes and again.plans == jaws[0].plans
    assert again.plan_scores == jaws[0].plan_scores


def test_seeds_follow_the_node_path(jaws):
    _, backend, _ = jaws
    seeds = [r.sampling.seed for batch in backend.batches for r in batch]
    assert len(set(seeds)) == len(seeds)  # every call sits at its own path
    _, other, _ = run(run_seed=8)
    assert [r.sampling.seed for b in other.batches for r in b] != seeds


def test_no_valid_plan_falls_back_to_the_question_itself():
    def reply(request, sample):
        if request.messages[0].content.startswith("You are a planning agent"):
            return "No idea."
        return apex_reply(request, sample)

    question = {**QUESTION, "gold_plan": None}
    config = ApexConfig(n_plans=2, max_hops=1, top_k=2)
    table = {"Who is the mother of the director of Jaws?": "<decision>answer</decision>"}
    result, backend, _ = run(config, question, _with(reply, table))
    rows = by_path(result)
    assert rows["q/p0"]["parsed"]["fallback"] and rows["q/p0"]["is_selected"]
    assert rows["q/p0/s1"]["parsed"]["question"] == QUESTION["question"]
    assert [p["source"] for p in result.plans] == ["planner", "planner"] and result.plan_scores == []
    assert rows["q/p0/s1/c/w/a"]["parsed"]["answer"] == "Leah Adler"


def _with(reply, sufficiency):
    def wrapped(request, sample):
        prompt = request.messages[0].content
        for sub_question, text in sufficiency.items():
            if "sufficient" in prompt and f"### Sub-question\n{sub_question}\n" in prompt:
                return text
        if prompt.startswith("Answer the sub-question below using the knowledge"):
            return "<answer>Leah Adler</answer>"
        return reply(request, sample)

    return wrapped


@pytest.mark.parametrize(
    "execute_gold, n_execute, executed",
    [
        (False, 1, ["q/p1"]),
        (True, 2, ["q/g", "q/p0", "q/p1"]),
        (True, 0, ["q/g"]),
    ],
)
def test_which_plans_run(execute_gold, n_execute, executed):
    config = ApexConfig(n_plans=3, max_hops=3, top_k=2, n_execute=n_execute, execute_gold=execute_gold)
    result, *_ = run(config)
    rows = by_path(result)
    assert sorted(p for p, r in rows.items() if r["kind"] == "plan" and r["is_selected"]) == executed
    answers = sorted(p.split("/")[1] for p, r in rows.items() if r["kind"] == "answer")
    assert answers == [p.split("/")[1] for p in executed]


def test_llm_rewrite_of_the_gold_plan():
    def reply(request, sample):
        prompt = request.messages[0].content
        if prompt.startswith("Rewrite the step"):
            step = prompt.partition("### Step\n")[2].partition("\n")[0]
            # the second rewrite drops its #1: refused, the template takes over
            return {
                "Jaws >> director": "<question>Who directed the film Jaws?",
                "#1 >> mother": "<question>Who is Spielberg's mother?",
            }[step]
        return apex_reply(request, sample)

    config = ApexConfig(n_plans=3, max_hops=3, top_k=2, execute_gold=False, rewrite="llm")
    result, backend, _ = run(config, reply=reply)
    gold = next(p for p in result.plans if p["source"] == "gold")
    rewritten = [s["question"] for s in gold["steps"]]
    assert rewritten == ["Who directed the film Jaws?", "Who is the mother of #1?"]
    rewrites = [r for b in backend.batches for r in b if r.messages[0].content.startswith("Rewrite")]
    assert len(rewrites) == 2 and all(r.sampling.temperature == 0.0 for r in rewrites)


@pytest.mark.parametrize(
    "field, value",
    [
        ("gold_plan", ["Jaws >> director", "#1 >> mother"]),
        ("my_plan", '["Jaws >> director", "#1 >> mother"]'),
    ],
)
def test_gold_plan_from_a_user_field(field, value):
    question = {k: v for k, v in QUESTION.items() if k != "gold_plan"} | {field: value}
    result, *_ = run(ApexConfig(n_plans=3, gold_plan_field=field, execute_gold=False), question)
    gold = next(p for p in result.plans if p["source"] == "gold")
    rewritten = [s["question"] for s in gold["steps"]]
    assert rewritten == ["Who is the director of Jaws?", "Who is the mother of #1?"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"n_plans": 0}, "n_plans"),
        ({"rewrite": "regex"}, "rewrite"),
        ({"metric": "bleu"}, "metric"),
        ({"plan_temperature": 0.0}, "plan_temperature"),
        ({"n_execute": -1}, "n_execute"),
    ],
)
def test_config_refuses_bad_values(change, message):
    with pytest.raises(ValueError, match=message):
        ApexConfig(**change)


def test_config_defaults_follow_the_paper():
    config = ApexConfig()
    assert (config.n_plans, config.top_k, config.exec_temperature, config.metric) == (8, 3, 0.0, "em")
    assert CONFIG.exec_spec.max_hops == 3
