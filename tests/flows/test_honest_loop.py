"""The shipped loop is honest: build on train, train on that export, evaluate on test, see no overlap.

A small run of what ``make demo`` then ``ragfactory evaluate`` does, through the real flows: a
DecEx build (scripted engine) over 40 bundled HotpotQA questions with the default partitions,
the ``train`` flow on its SFT export (a tiny random Llama), and the ``evaluate`` flow with the
default config (the test partition). The trained model's question ids and the evaluated ones do
not meet, and ``eval_summary`` says so (``n_seen`` = 0). Evaluating on the train partition, or
building on the test partition, is an override that is warned about and recorded in the runs.
"""

from __future__ import annotations

import pytest

from ragfactory.cli import print_build_summary
from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig, EvalConfig, TrainConfig
from ragfactory.flows.evaluate import evaluate
from ragfactory.flows.train import train
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, registered_engine, scripted_llm
from tests.flows.scripted_policies import decex_policy

GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=40).questions}


def _build_config(root, **search) -> BuildConfig:
    return BuildConfig.model_validate(
        {
            "name": "honest",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "hotpotqa", "limit": 40}],
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(max_in_flight=3),
            "search": {
                "strategies": ["decex"],
                "questions_per_dataset": 3,
                "shard_size": 3,
                "decex": {"k": 2, "n_rollouts": 2, "t_max": 2, "termination_samples": 1},
                **search,
            },
        }
    )


def _answer_x(request, sample):
    return "x"


@pytest.fixture(scope="module")
def loop(tmp_path_factory, tiny_model):  # noqa: F811
    root = tmp_path_factory.mktemp("honest")
    with registered_engine(ScriptedBackend(decex_policy(GOLD))):
        built = build(_build_config(root))
    trained = train(
        TrainConfig(
            method="sft",
            run_id=built["run_id"],
            base_model=tiny_model,
            warehouse={"root": str(root)},
            trl={"max_steps": 1, "per_device_train_batch_size": 2},
        )
    )
    return root, built, trained


@pytest.fixture
def scripted_evals(engines):
    engines(ScriptedBackend(_answer_x, fingerprint="x"))


def _eval_config(root, model, **extra) -> EvalConfig:
    return EvalConfig.model_validate(
        {"model": model, "modes": ["direct"], "warehouse": {"root": str(root)}, "llm": scripted_llm(), **extra}
    )


def test_the_build_expands_train_questions_in_hash_order(loop, capsys):
    root, built, _ = loop
    wh = Warehouse(root)
    assert built["status"] == "completed" and built["warnings"] == []
    expanded = query(
        wh,
        """
        select distinct q.question_id, q.partition, q.sample_key from nodes n join questions q using (question_id)
        order by q.sample_key""",
    ).to_pylist()
    first_train = (
        query(
            wh,
            """
        select question_id from questions where partition = 'train' order by sample_key, question_id limit 3
        """,
        )
        .column("question_id")
        .to_pylist()
    )
    assert [r["question_id"] for r in expanded] == first_train
    assert {r["partition"] for r in expanded} == {"train"}
    counts = query(wh, "select * from question_partitions").to_pylist()
    assert counts == [{"dataset": "hotpotqa", "n_train": 31, "n_valid": 4, "n_test": 5, "n_questions": 40}]
    print_build_summary(built)
    printed = " ".join(capsys.readouterr().out.split())
    assert "questions per partition" in printed and "│ hotpotqa │ 31 │ 4 │ 5 │ 40 │" in printed


def test_the_model_records_the_questions_it_trained_on(loop):
    root, built, trained = loop
    wh = Warehouse(root)
    exported = set(
        query(wh, "select distinct question_id from sft_examples where run_id = $r", {"r": built["run_id"]})
        .column("question_id")
        .to_pylist()
    )
    [row] = query(wh, "select question_ids from models").to_pylist()
    assert exported and set(row["question_ids"]) == exported
    view = query(
        wh, "select question_id, lineage_source from model_questions where model_id = $m", {"m": trained["model_id"]}
    ).to_pylist()
    assert {r["question_id"] for r in view} == exported and {r["lineage_source"] for r in view} == {"recorded"}


def test_the_default_evaluation_sees_none_of_the_training_questions(loop, scripted_evals):
    root, _, trained = loop
    wh = Warehouse(root)
    summary = evaluate(_eval_config(root, trained["model_id"]))
    assert summary["status"] == "completed" and summary["warnings"] == []
    evaluated = query(
        wh, "select question_id, partition, is_seen from evals where run_id = $r", {"r": summary["run_id"]}
    ).to_pylist()
    assert len(evaluated) == 5  # the test partition of these 40 questions: 31 train, 4 valid, 5 test
    assert {(r["partition"], r["is_seen"]) for r in evaluated} == {("test", False)}
    overlap = query(
        wh,
        """
        select count(*) as n from model_questions m join evals e using (model_id, question_id)
        where e.run_id = $r""",
        {"r": summary["run_id"]},
    ).to_pylist()
    assert overlap == [{"n": 0}]
    rows = query(
        wh, "select partition, n_questions, n_seen from eval_summary where run_id = $r", {"r": summary["run_id"]}
    ).to_pylist()
    assert rows == [{"partition": "test", "n_questions": 5, "n_seen": 0}]


def test_evaluating_on_train_marks_seen_questions_and_warns(loop, scripted_evals):
    root, _, trained = loop
    wh = Warehouse(root)
    seen = len(query(wh, "select * from model_questions").to_pylist())
    summary = evaluate(_eval_config(root, trained["model_id"], partition="train"))
    [row] = query(
        wh, "select n_questions, n_seen from eval_summary where run_id = $r", {"r": summary["run_id"]}
    ).to_pylist()
    assert row["n_seen"] == seen > 0 and row["n_questions"] > seen
    assert summary["aggregates"][0]["n_seen"] == seen
    [warnings] = (
        query(wh, "select warnings from runs where run_id = $r", {"r": summary["run_id"]}).column(0).to_pylist()
    )
    assert warnings == summary["warnings"] and len(warnings) == 2
    assert "train partition" in warnings[0] and f"{seen} of {row['n_questions']}" in warnings[1]


def test_a_build_on_the_test_partition_is_warned_about_and_recorded(loop, engines):
    root, _, _ = loop
    engines(ScriptedBackend(decex_policy(GOLD)))
    config = _build_config(root, partition="test", questions_per_dataset=1)
    summary = build(config.model_copy(update={"name": "honest-test"}))
    assert len(summary["warnings"]) == 1 and "'test'" in summary["warnings"][0]
    [warnings] = (
        query(Warehouse(root), "select warnings from runs where run_id = $r", {"r": summary["run_id"]})
        .column(0)
        .to_pylist()
    )
    assert warnings == summary["warnings"]
    expanded = (
        query(
            Warehouse(root),
            """
        select distinct q.partition from nodes n join questions q using (question_id) where n.run_id = $r""",
            {"r": summary["run_id"]},
        )
        .column(0)
        .to_pylist()
    )
    assert expanded == ["test"]


def test_an_evaluation_only_dataset_has_no_train_questions_and_says_so(loop, scripted_evals):
    root, _, _ = loop
    summary = evaluate(_eval_config(root, "embedded", datasets=["bamboogle"], partition="train"))
    assert summary["datasets"][0]["questions"] == 0
    assert any("bamboogle: no train questions" in w for w in summary["warnings"]), summary["warnings"]
    counts = query(Warehouse(root), "select * from question_partitions where dataset = 'bamboogle'").to_pylist()
    assert counts == [{"dataset": "bamboogle", "n_train": 0, "n_valid": 0, "n_test": 125, "n_questions": 125}]


def _train_ids(root, n: int) -> list[str]:
    rows = query(
        Warehouse(root),
        "select question_id from questions where partition = 'train' order by sample_key desc limit $n",
        {"n": n},
    ).to_pylist()
    return [r["question_id"] for r in rows]


@pytest.mark.parametrize("per_strategy", [False, True])
def test_a_build_expands_exactly_the_listed_questions(loop, per_strategy):
    """search.question_ids picks the questions (here the last two train ones in sample-key
    order, which a sample of three would never reach), as one list or per strategy."""
    root, _, _ = loop
    wanted = _train_ids(root, 2)
    listed = {"decex": wanted} if per_strategy else wanted
    with registered_engine(ScriptedBackend(decex_policy(GOLD))):
        built = build(_build_config(root, question_ids=listed))
    assert built["status"] == "completed", built
    expanded = (
        query(Warehouse(root), "select distinct question_id from nodes where run_id = $r", {"r": built["run_id"]})
        .column("question_id")
        .to_pylist()
    )
    assert sorted(expanded) == sorted(wanted)


@pytest.mark.parametrize(
    "pick,message", [("test", "not in the 'train' partition"), ("missing", "not in the warehouse's questions")]
)
def test_listed_questions_outside_the_partition_or_unknown_are_refused(loop, pick, message):
    root, _, _ = loop
    if pick == "test":
        ids = (
            query(Warehouse(root), "select question_id from questions where partition = 'test' limit 1")
            .column("question_id")
            .to_pylist()
        )
    else:
        ids = ["hotpotqa:no-such-question"]
    with registered_engine(ScriptedBackend(decex_policy(GOLD))):
        with pytest.raises(ValueError, match=message):
            build(_build_config(root, question_ids=ids))


def test_question_ids_for_a_strategy_the_build_does_not_run_are_refused():
    with pytest.raises(ValueError, match=r"strategies the build does not run: \['treeps'\]"):
        _build_config("/tmp/unused", question_ids={"treeps": ["hotpotqa:x"]})
