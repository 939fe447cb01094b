"""The dashboard's pages and API over a small warehouse written by hand.

The warehouse holds two builds: ``b-full`` (one DecEx question: the question node, a kept and a
pruned sub-question, a format error under the pruned one; one preference pair, kept over pruned;
one SFT example through the kept node; its LLM call and passages) and ``b-partial`` (a partial
build, one shard failed, nothing exported). Every expected value below is read off those rows.
The browser tests (tree viewer, plots, a real training through Prefect) are in
tests/e2e/test_stack.py.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from ragfactory.cli import app as cli
from ragfactory.dashboard.app import create_app
from ragfactory.dashboard.queries import literal_sql
from ragfactory.dashboard.security import BindRefused, check_bind
from ragfactory.warehouse.runs import record_run
from ragfactory.warehouse.store import Warehouse

T0 = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.UTC)
QUESTION = "hotpotqa:q1"
TOKEN = "a-long-enough-token-0123"


def _node(node_id, parent, depth, kind, text, selected, value=None, error=None, **extra):
    return {
        "node_id": node_id,
        "run_id": "b-full",
        "question_id": QUESTION,
        "parent_id": parent,
        "path": node_id,
        "depth": depth,
        "strategy": "decex",
        "kind": kind,
        "text": text,
        "parsed": json.dumps({"question": text}),
        "passage_ids": extra.pop("passage_ids", []),
        "llm_call_id": extra.pop("llm_call_id", None),
        "is_format_error": error is not None,
        "format_error": error,
        "is_leaf": False,
        "reward": None,
        "visits": 4 if value is not None else None,
        "value": value,
        "advantage": None,
        "is_selected": selected,
        **extra,
    }


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("dash") / "wh")
    record_run(wh, "b-full", "build", "completed", {}, "h1", T0, flow_run_id="0b6f3c1e-0000-4000-8000-000000000001")
    record_run(
        wh,
        "b-partial",
        "build",
        "partial",
        {},
        "h2",
        T0 + dt.timedelta(hours=1),
        failed_shards=["decex-0001"],
        error="failed shards: ['decex-0001']",
    )
    wh.write(
        "nodes",
        [
            _node("n0", None, 0, "question", "Who wrote Jaws?", False),
            _node(
                "n1",
                "n0",
                1,
                "sub_question",
                "Who is the author of Jaws?",
                True,
                value=1.0,
                passage_ids=["p2", "p1"],
                llm_call_id="c1",
            ),
            _node("n2", "n0", 1, "sub_question", "When was Jaws filmed?", False, value=0.25),
            _node("n3", "n2", 2, "self_answer", "<answer", False, error="unclosed <answer> tag"),
        ],
        shard="decex-0000",
    )
    wh.write(
        "passages",
        [
            {"passage_id": "p1", "source": "s", "title": "Jaws (novel)", "text": "A 1974 novel."},
            {"passage_id": "p2", "source": "s", "title": "Peter Benchley", "text": "An author."},
        ],
        shard="s",
    )
    wh.write(
        "llm_calls",
        [
            {
                "call_id": "c1",
                "run_id": "b-full",
                "role": "policy",
                "model_fingerprint": "fp",
                "messages": [{"role": "user", "content": "Decompose: Who wrote Jaws?"}],
                "sampling": json.dumps({"temperature": 0.7, "n": 2}),
                "seed": 7,
                "sample_index": 1,
                "text": "Who is the author of Jaws?",
                "finish_reason": "stop",
                "prompt_tokens": 12,
                "completion_tokens": 8,
                "latency_s": 0.5,
                "created_at": T0 + dt.timedelta(minutes=1),
            },
            {
                "call_id": "c0",
                "run_id": "b-full",
                "role": "policy",
                "model_fingerprint": "fp",
                "messages": [],
                "sampling": "{}",
                "seed": 7,
                "sample_index": 0,
                "text": "",
                "finish_reason": "stop",
                "prompt_tokens": 1,
                "completion_tokens": 1,
                "latency_s": 0.1,
                "created_at": T0 - dt.timedelta(days=1),
            },
        ],  # a cache hit
        shard="decex-0000",
    )
    turn = [{"role": "user", "content": "Who wrote Jaws?"}]
    wh.write(
        "preference_pairs",
        [
            {
                "pair_id": "pp1",
                "run_id": "b-full",
                "question_id": QUESTION,
                "strategy": "decex",
                "decision": "sub_question",
                "prompt": turn,
                "chosen": [{"role": "assistant", "content": "Who is the author of Jaws?"}],
                "rejected": [{"role": "assistant", "content": "When was Jaws filmed?"}],
                "chosen_value": 1.0,
                "rejected_value": 0.25,
                "gap": 0.75,
                "chosen_node_id": "n1",
                "rejected_node_id": "n2",
            }
        ],
        shard="decex-0000",
    )
    wh.write(
        "sft_examples",
        [
            {
                "example_id": "e1",
                "run_id": "b-full",
                "question_id": QUESTION,
                "strategy": "decex",
                "messages": turn,
                "node_ids": ["n0", "n1"],
            }
        ],
        shard="decex-0000",
    )
    return wh


@pytest.fixture(scope="module")
def client(warehouse):
    return TestClient(create_app(warehouse))


def test_runs_page_shows_each_build_and_the_partial_one_as_such(client):
    page = client.get("/").text
    assert page.index("b-partial") < page.index("b-full")  # newest first
    assert "Partial build: 1 shard(s) failed (decex-0001)" in page
    # c0 was made a day before the build began
    assert "2 LLM samples: 1 generated by the engine, 1 from the call cache" in page
    assert "preference_pairs 1" in page and "sft_examples 1" in page
    assert "not linked: no Prefect server is configured here" in page


def test_runs_page_shows_duration_and_each_strategys_tokens(warehouse):
    """b-full began on 2026-11-01 and was recorded (finished) when the fixture ran: hours ago;
    c1 belongs to decex through n1, c0 to no node."""
    from ragfactory.serve import free_port

    page = TestClient(create_app(warehouse, prefect_api_url=f"http://127.0.0.1:{free_port()}/api")).get("/").text
    section = page[page.index('id="run-b-full"') :]
    assert re.search(r'took <span class="duration">\d+ h \d\d min</span>', section)
    assert "<tr><td>decex</td><td>1</td><td>0</td><td>12</td><td>8</td></tr>" in section
    assert "<tr><td>(other)</td><td>1</td><td>1</td><td>1</td><td>1</td></tr>" in section
    assert "not linked: the Prefect server did not answer" in section  # no link to a page that is not there


def test_models_page_suggests_a_method_that_exists(client):
    page = client.get("/models").text
    assert "latest:sft" not in page and "train a model on the" in page


def test_tree_api_returns_the_question_tree_in_columns(client):
    tree = client.get("/api/tree", params={"run": "b-full", "strategy": "decex", "question": QUESTION}).json()
    assert tree["node_id"] == ["n0", "n1", "n2", "n3"]
    assert tree["parent_id"] == [None, "n0", "n0", "n2"]
    assert tree["is_selected"] == [False, True, False, False] and tree["is_format_error"] == [False, False, False, True]
    assert tree["value"] == [None, 1.0, 0.25, None]
    missing = client.get("/api/tree", params={"run": "b-full", "strategy": "mcts", "question": QUESTION})
    assert missing.status_code == 404 and "no mcts tree" in missing.json()["detail"]


def test_a_pruned_node_shows_its_value_and_the_pair_it_lost(client):
    detail = client.get("/api/node", params={"run": "b-full", "node": "n2"}).json()
    assert detail["node"]["value"] == 0.25 and detail["node"]["is_selected"] is False
    assert detail["node"]["parsed"] == {"question": "When was Jaws filmed?"}
    [pair] = detail["pairs"]
    assert pair["rejected_node_id"] == "n2" and pair["gap"] == 0.75
    assert detail["sft_examples"] == [] and detail["llm_call"] is None


def test_a_kept_node_shows_its_llm_call_sft_rows_and_passages_in_order(client):
    detail = client.get("/api/node", params={"run": "b-full", "node": "n1"}).json()
    call = detail["llm_call"]
    assert call["sampling"] == {"temperature": 0.7, "n": 2} and call["sample_index"] == 1
    assert call["messages"] == [{"role": "user", "content": "Decompose: Who wrote Jaws?"}]
    assert [row["example_id"] for row in detail["sft_examples"]] == ["e1"]
    passages = client.get("/api/passages", params=[("ids", "p2"), ("ids", "p1")]).json()
    assert [p["title"] for p in passages] == ["Peter Benchley", "Jaws (novel)"]


def test_a_format_error_node_names_its_error(client):
    detail = client.get("/api/node", params={"run": "b-full", "node": "n3"}).json()
    assert detail["node"]["format_error"] == "unclosed <answer> tag" and detail["node"]["is_format_error"]


def test_user_text_is_bound_as_a_parameter_never_spliced_into_sql(client):
    sneaky = "b-full' or '1'='1"
    tree = client.get("/api/tree", params={"run": sneaky, "strategy": "decex", "question": QUESTION})
    assert tree.status_code == 404
    node = client.get("/api/node", params={"run": sneaky, "node": "n1"})
    assert node.status_code == 404


def test_rewards_page_plots_values_with_their_sql(client):
    page = client.get("/rewards", params={"run": "b-full"}).text
    assert 'id="plot-node_values"' in page and "2 values · 1 strategy" in page  # n1 and n2 have values
    assert "where n.run_id = $run and n.value is not null" in page  # the SQL as it ran
    assert '<code>$run = "b-full"</code>' in page  # with its bound parameter
    assert "strategy = null" not in page
    assert 'id="plot-pair_gaps"' in page and 'id="plot-sepr_f1"' not in page  # no plan scores here


def test_rewards_split_by_outcome_and_depth(client):
    """The question's kept answers: none (n1 and n2 are not leaves): every value is 'no answer'."""
    page = client.get("/rewards", params={"run": "b-full", "split": "outcome"}).text
    assert _figure(page, "node_values") == {"decex": {"no answer": [0.25, 1.0]}}
    page = client.get("/rewards", params={"run": "b-full", "split": "depth"}).text
    assert _figure(page, "node_values") == {"decex": {"depth 1": [0.25, 1.0]}}


def _figure(page: str, key: str) -> dict:
    """A reward panel's series, each group's values sorted (rows come in no set order)."""
    figure = json.loads(page.split(f'id="plot-{key}" data-figure=\'')[1].split("'")[0])
    return {s: {g: sorted(v) for g, v in groups.items()} for s, groups in figure["series"].items()}


def test_integers_stay_integers_in_the_console_and_in_json(client, warehouse):
    page = client.get("/sql", params={"q": "select sum(depth) as s from nodes"}).text
    assert "<td>4</td>" in page  # depths 0 + 1 + 1 + 2, a HUGEINT sum
    result = CliRunner().invoke(
        cli, ["sql", "select sum(depth) as s from nodes", "--format", "json", "--root", str(warehouse.root)]
    )
    assert result.exit_code == 0 and json.loads(result.output) == {"s": 4}


def test_the_console_and_the_command_show_duckdbs_error_whole(client, warehouse):
    page = client.get("/sql", params={"q": "select nodez from nodes"}).text
    assert "not found in FROM clause!\nCandidate bindings: " in page
    result = CliRunner().invoke(cli, ["sql", "select nodez from nodes", "--root", str(warehouse.root)])
    assert result.exit_code == 1 and "Candidate bindings: " in result.output


def test_sql_page_lists_tables_and_views_with_columns(client):
    page = client.get("/sql").text
    assert '<details class="relation" data-relation="nodes">' in page
    assert '<details class="relation" data-relation="strategy_summary">' in page  # a shipped view
    assert page.index("<h4>tables</h4>") < page.index('data-relation="nodes"') < page.index("<h4>views</h4>")


def test_a_nodes_fate_and_every_reward_raw_and_scaled(client):
    pruned = client.get("/api/node", params={"run": "b-full", "node": "n2"}).json()
    assert pruned["status"] == "pruned" and pruned["fate"] == "pruned: value 0.25 below the kept sibling n1…'s 1"
    kept = client.get("/api/node", params={"run": "b-full", "node": "n1"}).json()
    assert kept["fate"] == "kept: highest value 1 of 2 siblings"
    root = client.get("/api/node", params={"run": "b-full", "node": "n0"}).json()
    assert root["status"] == "question"
    error = client.get("/api/node", params={"run": "b-full", "node": "n3"}).json()
    assert error["fate"] == "format error: unclosed <answer> tag"


def test_literal_sql_quotes_what_it_writes_in():
    text = literal_sql("reward_pair_gaps", {"run": "it's"})
    assert "p.run_id = 'it''s'" in text and "$" not in text


def test_sql_console_runs_a_read_and_downloads_it_as_csv(client):
    page = client.get("/sql", params={"q": "select node_id, value from nodes where value is not null order by 1"})
    assert page.status_code == 200 and "2 row(s)" in page.text
    csv = client.get("/sql.csv", params={"q": "select node_id, value from nodes where value is not null order by 1"})
    assert csv.headers["content-type"].startswith("text/csv")
    assert csv.text.splitlines() == ["node_id,value", "n1,1.0", "n2,0.25"]


@pytest.mark.parametrize(
    "statement",
    [
        "create table stolen as select * from nodes",
        "insert into nodes select * from nodes",
        "copy (select * from nodes) to '{out}'",
        "attach '{out}' as other",
        "set enable_external_access = true",
    ],
)
def test_sql_console_refuses_every_write(client, tmp_path, statement):
    out = tmp_path / "out.csv"
    response = client.get("/sql", params={"q": statement.format(out=out)})
    assert response.status_code == 400 and 'id="sql-error">refused' in response.text
    assert client.get("/sql.csv", params={"q": statement.format(out=out)}).status_code == 400
    assert not out.exists()


def test_train_refuses_a_build_without_rows_before_submitting(client):
    response = client.post("/train", data={"run": "b-partial", "method": "dpo", "config": "{}", "job_variables": "{}"})
    assert response.status_code == 409
    assert "refused: build b-partial has no preference_pairs rows, which dpo trains on" in response.text
    unknown = client.post("/train", data={"run": "nope", "method": "sft", "config": "{}", "job_variables": "{}"})
    assert unknown.status_code == 409 and "no build run &#39;nope&#39;" in unknown.text


def test_train_without_a_prefect_server_says_so(client):
    response = client.post("/train", data={"run": "b-full", "method": "dpo", "config": "{}", "job_variables": "{}"})
    assert response.status_code == 503 and "no Prefect server" in response.text


def test_train_page_lists_every_method_with_its_table(client):
    page = client.get("/train", params={"run": "b-full"}).text
    for method, table in [
        ("sft", "sft_examples"),
        ("dpo", "preference_pairs"),
        ("prm", "step_labels"),
        ("tree-advantage", "trajectories"),
        ("grpo-agentic", "grpo_prompts"),
    ]:
        assert f"{method} (reads {table})" in page


def test_check_bind_needs_a_token_off_this_machine():
    check_bind("127.0.0.1", None)
    check_bind("localhost", None)
    with pytest.raises(BindRefused, match="without a token"):
        check_bind("0.0.0.0", None)
    with pytest.raises(BindRefused, match="at least 16 characters"):
        check_bind("0.0.0.0", "short")
    check_bind("0.0.0.0", TOKEN)


def test_the_command_refuses_a_non_local_bind_without_a_token(warehouse, monkeypatch):
    monkeypatch.delenv("RAGFACTORY_DASHBOARD_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["dashboard", "--host", "0.0.0.0", "--root", str(warehouse.root)])
    assert result.exit_code == 1 and "refusing to bind the dashboard to 0.0.0.0 without a token" in result.output


def test_with_a_token_every_request_must_carry_it(warehouse):
    guarded = TestClient(create_app(warehouse, token=TOKEN))
    assert guarded.get("/").status_code == 401
    assert (
        guarded.get("/api/tree", params={"run": "b-full", "strategy": "decex", "question": QUESTION}).status_code == 401
    )
    assert guarded.get("/", headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 401
    assert guarded.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    first = guarded.get("/", params={"token": TOKEN}, follow_redirects=False)
    assert first.status_code == 303 and "token" not in first.headers["location"]
    assert guarded.get("/").status_code == 200  # the cookie the first visit set


def test_a_form_post_from_another_origin_is_refused(client):
    response = client.post("/train", data={"run": "b-full", "method": "dpo"}, headers={"Origin": "http://evil.example"})
    assert response.status_code == 403


def test_train_against_an_unreachable_prefect_server_says_which(warehouse):
    from ragfactory.serve import free_port

    api = f"http://127.0.0.1:{free_port()}/api"
    client = TestClient(create_app(warehouse, prefect_api_url=api))
    response = client.post(
        "/train", data={"run": "b-full", "method": "dpo", "config": '{"trl": {"max_steps": 1}}', "job_variables": "{}"}
    )
    assert response.status_code == 400 and f"the Prefect server at {api} did not answer" in response.text


def test_train_names_a_config_field_that_does_not_validate(warehouse):
    client = TestClient(create_app(warehouse, prefect_api_url="http://127.0.0.1:9/api"))
    response = client.post(
        "/train", data={"run": "b-full", "method": "dpo", "config": '{"save_steps": 0}', "job_variables": "{}"}
    )
    assert response.status_code == 400 and "save_steps: Input should be greater than or equal to 1" in response.text
    response = client.post("/train", data={"run": "b-full", "method": "dpo", "config": "[1]", "job_variables": "{}"})
    assert response.status_code == 400 and "config: a JSON object {...} is expected, not list" in response.text
