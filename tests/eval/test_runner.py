"""Evaluation rows, their scores and aggregates, run ids, and batching across questions and modes."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from ragfactory.tasks.eval.inference import EvalQuestion, Outcome, check_max_tokens, mode_grammars
from ragfactory.tasks.eval.runner import (
    aggregate,
    answer_questions,
    calls_of,
    check_modes,
    eval_hash,
    eval_id,
    eval_modes,
    eval_rows,
)
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.cache import CallCache
from ragfactory.tasks.llm.grammar import GrammarError
from ragfactory.warehouse.catalog import query
from tests.eval.scenario import CONFIG, QUESTIONS, policy, retriever
from tests.fakes import ScriptedBackend

NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
GOLD = EvalQuestion("q1", "Who directed Jaws?", ("Steven Spielberg", "Spielberg, Steven"))


@pytest.mark.parametrize(
    "prediction,em,f1,cover_em",
    [
        ("Steven Spielberg", 1.0, 1.0, 1.0),
        ("steven spielberg.", 1.0, 1.0, 1.0),
        ("Spielberg", 0.0, 2 / 3, 0.0),  # P 1, R 1/2
        ("It was Steven Spielberg", 0.0, 2 / 3, 1.0),  # P 1/2, R 1
        ("", 0.0, 0.0, 0.0),
    ],
)
def test_rows_score_the_prediction_against_every_golden_answer(prediction, em, f1, cover_em):
    outcome = Outcome(prediction, n_steps=3, n_retrievals=1, call_ids=["c1", "c2", "c3"])
    [row] = eval_rows("eval-x", "m", "hotpotqa", "agentic", [GOLD], [outcome], NOW)
    assert (row["em"], row["f1"], row["cover_em"]) == (em, pytest.approx(f1), cover_em)
    assert (row["n_steps"], row["n_retrievals"], row["llm_call_ids"]) == (3, 1, ["c1", "c2", "c3"])
    assert row["prediction"] == prediction and row["format_error"] is None


def test_format_errors_are_kept_on_the_row():
    outcome = Outcome("", n_steps=2, errors=["round 0: empty output", "no <answer> in 2 rounds"])
    [row] = eval_rows("eval-x", "m", "hotpotqa", "agentic", [GOLD], [outcome], NOW)
    assert row["format_error"] == "round 0: empty output; no <answer> in 2 rounds"
    assert row["em"] == 0.0 and row["n_steps"] == 2


def test_eval_ids_are_stable_and_tell_rows_apart():
    key = ("eval-a", "hotpotqa", "agentic", "q1")
    assert eval_id(*key) == eval_id(*key)
    others = [
        ("eval-b", "hotpotqa", "agentic", "q1"),
        ("eval-a", "musique", "agentic", "q1"),
        ("eval-a", "hotpotqa", "rag", "q1"),
        ("eval-a", "hotpotqa", "agentic", "q2"),
    ]
    assert len({eval_id(*key), *(eval_id(*other) for other in others)}) == 5


def test_eval_hash_depends_on_model_and_settings_only():
    settings = {"inference": {"max_rounds": 3, "top_k": 3}, "retrieval": {"default": "bm25"}}
    assert eval_hash("m", settings) == eval_hash("m", dict(reversed(list(settings.items()))))
    assert eval_hash("m", settings) != eval_hash("other", settings)
    assert eval_hash("m", settings) != eval_hash("m", {**settings, "inference": {"max_rounds": 4}})


def test_an_evaluation_in_another_dtype_is_a_run_of_its_own():
    """A bfloat16 evaluation must not replace the float32 one's rows: the engine's dtype and options
    enter the run's hash when set; one that sets neither keeps the hash it had before they could."""
    from ragfactory.flows.config import EvalConfig

    plain = EvalConfig.model_validate({"model": "embedded"}).answer_fields()
    half = EvalConfig.model_validate({"model": "embedded", "llm": {"policy": {"dtype": "bfloat16"}}}).answer_fields()
    assert "engine" not in plain and half["engine"] == {"dtype": "bfloat16"}
    assert eval_hash("m", plain) == "4e405b30d43c4d25"  # computed before the engine could enter
    assert eval_hash("m", half) != eval_hash("m", plain)


def test_aggregate_means_per_model_dataset_and_mode():
    rows = [
        {
            "model_id": "a",
            "dataset": "d",
            "mode": "rag",
            "em": 1.0,
            "f1": 1.0,
            "cover_em": 1.0,
            "n_retrievals": 1,
            "n_steps": 1,
            "format_error": None,
        },
        {
            "model_id": "a",
            "dataset": "d",
            "mode": "rag",
            "em": 0.0,
            "f1": 0.5,
            "cover_em": 1.0,
            "n_retrievals": 1,
            "n_steps": 1,
            "format_error": "empty output",
            "is_seen": True,
        },
        {
            "model_id": "b",
            "dataset": "d",
            "mode": "rag",
            "em": 0.0,
            "f1": 0.0,
            "cover_em": 0.0,
            "n_retrievals": 3,
            "n_steps": 5,
            "format_error": None,
            "is_seen": False,
        },
    ]
    assert aggregate(rows) == [
        {
            "model_id": "a",
            "dataset": "d",
            "mode": "rag",
            "n_questions": 2,
            "em": 0.5,
            "f1": 0.75,
            "cover_em": 1.0,
            "n_retrievals": 1.0,
            "n_steps": 1.0,
            "n_format_errors": 1,
            "n_seen": 1,
        },
        {
            "model_id": "b",
            "dataset": "d",
            "mode": "rag",
            "n_questions": 1,
            "em": 0.0,
            "f1": 0.0,
            "cover_em": 0.0,
            "n_retrievals": 3.0,
            "n_steps": 5.0,
            "n_format_errors": 0,
            "n_seen": 0,
        },
    ]


def _questions(n: int) -> list[EvalQuestion]:
    return [EvalQuestion(f"q{i}", QUESTIONS[i % 2].question, QUESTIONS[i % 2].golden_answers) for i in range(n)]


@pytest.mark.parametrize("n", [1, 4, 9])
def test_questions_of_every_mode_share_engine_calls(n):
    backend = ScriptedBackend(policy)
    batcher = Batcher(backend)
    modes = ["agentic", "direct", "rag"]
    outcomes = asyncio.run(answer_questions(_questions(n), modes, batcher, retriever(), CONFIG, 3 * n))
    # round 0 of every (mode, question) is one batch; agentic's Grounding and answer rounds follow
    assert [len(batch) for batch in backend.batches] == [3 * n, n, n]
    assert list(outcomes) == modes and all(len(found) == n for found in outcomes.values())
    golden = [q.golden_answers[0] for q in _questions(n)]
    assert [o.prediction for o in outcomes["agentic"]] == golden
    assert [o.n_steps for o in outcomes["agentic"]] == [3] * n
    assert [o.prediction for o in outcomes["direct"]] == ["I think it is Nobody"] * n
    assert [o.prediction for o in outcomes["rag"]] == [g.split()[-1] for g in golden]


def test_max_in_flight_bounds_the_batch():
    backend = ScriptedBackend(policy)
    asyncio.run(answer_questions(_questions(6), ["direct"], Batcher(backend), None, CONFIG, 4))
    assert [len(batch) for batch in backend.batches] == [4, 2]


def test_unknown_modes_are_refused_by_name():
    with pytest.raises(
        ValueError, match=r"\['search'\].*known: \['agentic', 'apex', 'decex', 'direct', 'r3', 'rag', 'treeps'\]"
    ):
        check_modes(["direct", "search"])


def test_calls_of_picks_the_calls_a_shard_used():
    cache = CallCache("eval-x")
    backend = ScriptedBackend(policy)
    outcomes = asyncio.run(
        answer_questions(QUESTIONS, ["agentic", "direct"], Batcher(backend, cache), retriever(), CONFIG, 4)
    )
    rows = {mode: eval_rows("eval-x", "m", "d", mode, QUESTIONS, found, NOW) for mode, found in outcomes.items()}
    agentic = calls_of(rows["agentic"], cache.rows())
    direct = calls_of(rows["direct"], cache.rows())
    assert len(agentic) == 6 and len(direct) == 2 and len(cache.rows()) == 8
    assert {r["call_id"] for r in agentic}.isdisjoint(r["call_id"] for r in direct)
    assert [r["call_id"] for r in agentic] == sorted(r["call_id"] for r in agentic)


def test_eval_summary_view_compares_models(warehouse):
    for model, predictions in {
        "base": ["Nobody", "Ridley Scott"],
        "sft-1": ["Steven Spielberg", "Ridley Scott"],
    }.items():
        run_id = f"eval-{model}"
        outcomes = [Outcome(p, n_steps=2, n_retrievals=1) for p in predictions]
        rows = eval_rows(run_id, model, "hotpotqa", "rag", QUESTIONS, outcomes, NOW)
        warehouse.write("evals", rows, "hotpotqa-rag")
    summary = query(warehouse, "select model_id, n_questions, em, avg_steps from eval_summary").to_pylist()
    assert summary == [
        {"model_id": "base", "n_questions": 2, "em": 0.5, "avg_steps": 2.0},
        {"model_id": "sft-1", "n_questions": 2, "em": 1.0, "avg_steps": 2.0},
    ]


def test_every_mode_declares_the_grammars_that_hold_its_answers():
    """Built-in or added by a strategy (its ``evaluation`` module's ``GRAMMARS``), each mode's
    grammars are checked against ``max_tokens`` before any question is asked."""
    grammars = mode_grammars()
    assert set(grammars) == set(eval_modes())
    for mode in grammars:
        check_max_tokens([mode], 256)
        with pytest.raises(GrammarError, match="evaluation max_tokens=1"):
            check_max_tokens([mode], 1)
