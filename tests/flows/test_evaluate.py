"""The evaluate flow on 20 bundled HotpotQA test questions: a base and a trained model, compared in SQL.

The engine is the only double (a scripted backend per model, registered as an engine that picks
it by the model the flow loads): the real flow, tasks, ingest, BM25 index, batcher, call cache
and warehouse run. The "trained" model follows ReasonRAG's format and answers correctly; the
base model writes no tags. The slow test repeats it with real weights: SmolLM2 and one SFT step of it, 20 questions each.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ragfactory.cli import app
from ragfactory.flows.config import EvalConfig
from ragfactory.flows.evaluate import evaluate
from ragfactory.tasks.llm.config import ENGINE_ENV
from ragfactory.tasks.training.registry import model_row, register_model
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import base_policy, trained_policy

TRAINED = "sft-test"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("wh")
    weights = tmp_path_factory.mktemp("weights")
    row = model_row(TRAINED, {"run_id": "build-1"}, "embedded", "sft", "snap", {}, {}, str(weights))
    register_model(Warehouse(root), row)
    return root, str(weights)


@pytest.fixture
def models(root, engines, monkeypatch):
    """One scripted backend per model the flow may load, behind one registered engine that picks
    by the role's model; configs name it, and the CLI's through ``$RAGFACTORY_ENGINE``."""
    backends = {
        "embedded": ScriptedBackend(base_policy, fingerprint="base"),
        root[1]: ScriptedBackend(trained_policy, fingerprint="trained"),
    }
    monkeypatch.setenv(ENGINE_ENV, engines(lambda role, cache_dir: backends[role.model]))
    return backends


def _config(root, model: str, **extra) -> EvalConfig:
    return EvalConfig.model_validate(
        {
            "model": model,
            "datasets": ["hotpotqa"],
            "limit": 20,
            "max_rounds": 4,
            "warehouse": {"root": str(root)},
            "llm": scripted_llm(),
            **extra,
        }
    )


def test_base_and_trained_models_write_evals_that_one_query_compares(root, models):
    wh = Warehouse(root[0])
    base = evaluate(_config(root[0], "embedded"))
    trained = evaluate(_config(root[0], TRAINED))
    assert base["status"] == trained["status"] == "completed"
    assert (base["model_id"], trained["model_id"]) == ("embedded", TRAINED)
    assert base["run_id"] != trained["run_id"] and base["run_id"].startswith("eval-")
    counts = query(wh, "select model_id, mode, count(*) as n from evals group by 1, 2 order by 1, 2")
    assert counts.to_pylist() == [
        {"model_id": m, "mode": mode, "n": 20} for m in ("embedded", TRAINED) for mode in ("agentic", "direct", "rag")
    ]

    compare = (
        "select model_id, mode, n_questions, em, avg_retrievals, avg_steps, n_format_errors "
        "from eval_summary where dataset = 'hotpotqa' and mode = 'agentic' order by model_id"
    )
    result = CliRunner().invoke(app, ["sql", compare, "--format", "json", "--root", str(root[0])])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert rows == [
        {
            "model_id": "embedded",
            "mode": "agentic",
            "n_questions": 20,
            "em": 0.0,
            "avg_retrievals": 0.0,
            "avg_steps": 4.0,
            "n_format_errors": 20,
        },
        {
            "model_id": TRAINED,
            "mode": "agentic",
            "n_questions": 20,
            "em": 1.0,
            "avg_retrievals": 1.0,
            "avg_steps": 3.0,
            "n_format_errors": 0,
        },
    ]
    by_mode = {(a["model_id"], a["mode"]): a for a in trained["aggregates"] + base["aggregates"]}
    assert by_mode[(TRAINED, "direct")]["em"] == 1.0 and by_mode[("embedded", "direct")]["em"] == 0.0
    runs = query(wh, "select run_id, flow, status from runs where flow = 'evaluate' order by run_id")
    assert {r["run_id"] for r in runs.to_pylist()} == {base["run_id"], trained["run_id"]}
    assert {r["status"] for r in runs.to_pylist()} == {"completed"}


def test_a_rerun_replaces_its_rows_from_the_call_cache(root, models):
    wh = Warehouse(root[0])
    first = evaluate(_config(root[0], TRAINED, modes=["direct", "rag"]))
    calls = models[root[1]].calls
    before = query(
        wh, "select eval_id, prediction from evals where run_id = $r order by 1", {"r": first["run_id"]}
    ).to_pylist()
    again = evaluate(_config(root[0], TRAINED, modes=["direct", "rag"]))
    assert again["run_id"] == first["run_id"]
    assert models[root[1]].calls == calls  # every completion came from llm_calls
    after = query(
        wh, "select eval_id, prediction from evals where run_id = $r order by 1", {"r": first["run_id"]}
    ).to_pylist()
    assert after == before and len(after) >= 40  # rows replaced, not added; other modes kept
    used = query(
        wh,
        """
        select (select count(distinct call_id) from llm_calls where run_id = $r) as calls,
               (select count(distinct c) from (select unnest(llm_call_ids) as c from evals
                                               where run_id = $r)) as referenced
    """,
        {"r": first["run_id"]},
    ).to_pylist()
    assert used[0]["calls"] == used[0]["referenced"] >= 40  # each mode's shard holds its calls


def test_other_settings_are_another_run(root, models):
    other = evaluate(_config(root[0], TRAINED, modes=["direct"], max_tokens=32, limit=3))
    rows = query(
        Warehouse(root[0]), "select count(*) as n from evals where run_id = $r", {"r": other["run_id"]}
    ).to_pylist()
    assert rows == [{"n": 3}] and other["aggregates"][0]["n_questions"] == 3


def test_searches_go_to_the_retrieval_ledger_and_another_run_replays_them(root, models):
    """The trained policy searches each question once in agentic and rag modes: 2 searches a
    question, each a ``retrievals`` row of the run (strategy ``eval``) naming its question; a
    second run with other settings asks the same queries and is answered from the first's rows."""
    wh = Warehouse(root[0])
    first = evaluate(_config(root[0], TRAINED, modes=["agentic", "rag"], limit=4, max_tokens=64))
    second = evaluate(_config(root[0], TRAINED, modes=["agentic", "rag"], limit=4, max_tokens=72))
    assert first["run_id"] != second["run_id"]
    sql = (
        "select run_id, strategy, count(*) as n, count(distinct question_id) as questions, "
        "bool_and(cached) as all_cached from retrievals where run_id in ($a, $b) group by 1, 2 order by 1"
    )
    rows = {r["run_id"]: r for r in query(wh, sql, {"a": first["run_id"], "b": second["run_id"]}).to_pylist()}
    searched = query(
        wh,
        "select run_id, sum(n_retrievals) as n from evals where run_id in ($a, $b) group by 1",
        {"a": first["run_id"], "b": second["run_id"]},
    ).to_pylist()
    assert {r["run_id"]: r["n"] for r in searched} == {first["run_id"]: 8, second["run_id"]: 8}
    for run in (first, second):
        assert (rows[run["run_id"]]["strategy"], rows[run["run_id"]]["n"], rows[run["run_id"]]["questions"]) == (
            "eval",
            8,
            4,
        )
    assert rows[second["run_id"]]["all_cached"] is True


def test_cli_evaluates_and_prints_the_aggregates(root, models):
    result = CliRunner().invoke(
        app,
        [
            "evaluate",
            "--model",
            TRAINED,
            "--dataset",
            "hotpotqa",
            "--limit",
            "5",
            "--mode",
            "direct",
            "--root",
            str(root[0]),
        ],
    )
    assert result.exit_code == 0, result.output
    assert TRAINED in result.output and "direct" in result.output and "eval_summary" in result.output


def test_compare_scores_both_models_on_the_same_questions(root, models):
    """The trained model answers all 6 test questions right and the base none: EM delta 1, a point
    interval [1, 1] (every pair differs by 1), McNemar 6 vs 0 discordant: p = 2 * (1/2)^6."""
    result = CliRunner().invoke(
        app,
        [
            "evaluate",
            "--model",
            TRAINED,
            "--compare",
            "embedded",
            "--limit",
            "6",
            "--mode",
            "direct",
            "--root",
            str(root[0]),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "a = sft-test vs b = embedded" in " ".join(result.output.split())
    rows = query(Warehouse(root[0]), "select * from eval_compare").to_pylist()
    assert [(r["model_a"], r["model_b"], r["dataset"], r["mode"], r["partition"], r["n"]) for r in rows] == [
        (TRAINED, "embedded", "hotpotqa", "direct", "test", 6)
    ]
    row = rows[0]
    assert (row["em_a"], row["em_b"], row["em_delta"], row["em_delta_low"], row["em_delta_high"]) == (1, 0, 1, 1, 1)
    assert (row["n_a_only"], row["n_b_only"], row["mcnemar_p"]) == (6, 0, 2 / 64)
    evaluated = query(
        Warehouse(root[0]),
        """
        select model_id, list(question_id order by question_id) as ids from evals
        where run_id in ($a, $b) group by 1 order by 1""",
        {"a": row["run_a"], "b": row["run_b"]},
    ).to_pylist()
    assert len(evaluated) == 2 and evaluated[0]["ids"] == evaluated[1]["ids"]


def test_compare_from_the_flow_parameter(root, models):
    summary = evaluate(_config(root[0], TRAINED, modes=["direct", "rag"], limit=3, compare="embedded"))
    assert summary["status"] == "completed" and summary["base"]["model_id"] == "embedded"
    assert [(r["mode"], r["n"], r["n_a_only"]) for r in summary["comparison"]] == [("direct", 3, 3), ("rag", 3, 3)]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--dataset", "no-such-dataset"], "ragfactory build"),
        (["--mode", "search"], "modes"),
        (["--model", "sft-missing-weights"], "not on disk"),
    ],
)
def test_cli_reports_bad_requests(root, models, args, message, tmp_path):
    register_model(
        Warehouse(root[0]), model_row("sft-missing-weights", {}, "embedded", "sft", "s", {}, {}, str(tmp_path / "gone"))
    )
    result = CliRunner().invoke(app, ["evaluate", "--limit", "2", *args, "--root", str(root[0])])
    assert result.exit_code == 1 and message in " ".join(result.output.split()), result.output


@pytest.mark.slow
def test_the_embedded_model_and_a_trained_one_are_evaluated_and_compared(tmp_path, embedded_model):
    """The acceptance run with real weights: SmolLM2 and one SFT step of it, 20 questions each."""
    from ragfactory.flows.config import TrainConfig
    from ragfactory.flows.train import train
    from tests.training.exports import write_exports

    root = tmp_path / "wh"
    wh = Warehouse(root)
    write_exports(wh, run_id="build-1")
    trained = train(
        TrainConfig(
            method="sft",
            run_id="build-1",
            base_model=str(embedded_model),
            warehouse={"root": str(root)},
            trl={"max_steps": 1, "per_device_train_batch_size": 2, "learning_rate": 1e-4},
        )
    )
    assert trained["status"] == "trained"
    summaries = [
        evaluate(
            EvalConfig.model_validate(
                {
                    "model": model,
                    "datasets": ["hotpotqa"],
                    "limit": 20,
                    "max_rounds": 2,
                    "max_tokens": 64,
                    "top_k": 2,
                    "warehouse": {"root": str(root)},
                }
            )
        )
        for model in (str(embedded_model), trained["model_id"])
    ]
    assert [s["status"] for s in summaries] == ["completed", "completed"]
    rows = query(wh, "select * from evals").to_pylist()
    assert len(rows) == 2 * 3 * 20
    assert {r["model_id"] for r in rows} == {str(embedded_model.resolve()), trained["model_id"]}
    for row in rows:
        assert all(0.0 <= row[m] <= 1.0 for m in ("em", "f1", "cover_em"))
        assert row["em"] <= row["cover_em"] and row["prediction"] is not None
        assert len(row["llm_call_ids"]) == row["n_steps"]
        steps = (1, 2) if row["mode"] == "agentic" else (1, 1)
        assert steps[0] <= row["n_steps"] <= steps[1]
        assert row["n_retrievals"] <= {"agentic": 2, "direct": 0, "rag": 1}[row["mode"]]
        assert row["mode"] != "rag" or row["n_retrievals"] == 1
    agentic = [row for row in rows if row["mode"] == "agentic"]
    errors = [row["format_error"] for row in agentic if row["format_error"] is not None]
    assert len(errors) <= 0.01 * len(agentic), errors  # held to ReasonRAG's grammar: none of 40

    compare = (
        "select mode, model_id, n_questions, em, f1 from eval_summary "
        "where dataset = 'hotpotqa' order by mode, model_id"
    )
    result = CliRunner().invoke(app, ["sql", compare, "--format", "json", "--root", str(root)])
    assert result.exit_code == 0, result.output
    table = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["mode"], r["n_questions"]) for r in table] == [
        (m, 20) for m in ("agentic", "direct", "rag") for _ in range(2)
    ]
    assert {r["model_id"] for r in table} == {str(embedded_model.resolve()), trained["model_id"]}


@pytest.mark.parametrize(
    "modes,max_tokens,smallest", [(["direct"], 8, 13), (["rag"], 12, 13), (["direct", "agentic"], 49, 50)]
)
def test_a_max_tokens_too_small_for_a_modes_grammar_is_refused_with_the_request(modes, max_tokens, smallest):
    """Refused by the config (the UI's run form, the CLI), not by every question's engine call.

    flashrag_direct's output is one short answer line, capped at 12 tokens, plus 1 to end: 13."""
    from pydantic import ValidationError

    config = {"model": "embedded", "datasets": ["hotpotqa"], "modes": modes}
    with pytest.raises(ValidationError, match=f"evaluation max_tokens={max_tokens}: .* needs max_tokens >= {smallest}"):
        EvalConfig.model_validate(config | {"max_tokens": max_tokens})
    assert EvalConfig.model_validate(config | {"max_tokens": smallest}).max_tokens == smallest
    free = config | {"max_tokens": max_tokens, "llm": {"policy": {"structured": False}}}
    assert EvalConfig.model_validate(free).max_tokens == max_tokens
