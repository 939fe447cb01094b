"""A build over a seeded world (docs/world.md): three split files of one dataset each land in their
partition, and with ``corpus.from_datasets: false`` only the world's corpus is indexed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig, NightlyConfig
from ragfactory.tasks.data.world import WorldSpec, build_config, generate
from ragfactory.tasks.retrieval.bm25 import BM25Retriever
from ragfactory.tasks.search.mcts.steps import parse_turn
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # the null engine's tokenizer and Prefect load
def test_a_world_build_ingests_every_split_and_searches_its_corpus_only(tmp_path):
    generate(WorldSpec(seed=0, questions=20, passages=400), tmp_path / "world")
    config = build_config(tmp_path / "world") | {
        "warehouse": {"root": str(tmp_path / "wh")},
        "llm": {"policy": {"backend": "null", "model": "embedded"}},
        "search": {"strategies": ["decex"], "questions_per_dataset": 2, "decex": {"k": 2, "n_rollouts": 1, "t_max": 1}},
    }
    summary = build(BuildConfig.model_validate(config), run_id="world")
    assert summary["status"] == "completed", summary["errors"]
    wh = Warehouse(tmp_path / "wh")
    # 20 questions at 0.6 / 0.15 / 0.25: 3 valid, 5 test, 12 train, each file its own partition
    counts = query(wh, "select partition, count(*) as n from questions group by 1 order by 1").to_pylist()
    assert counts == [{"partition": "test", "n": 5}, {"partition": "train", "n": 12}, {"partition": "valid", "n": 3}]
    # the index holds the corpus's 400 passages, not the rows' paragraphs a second time
    assert len(BM25Retriever.load(summary["indexes"]["bm25"]["path"]).passages) == 400
    expanded = query(wh, "select distinct question_id from nodes").column("question_id").to_pylist()
    assert len(expanded) == 2 and all(q.startswith("world:s0-train-") for q in expanded)


@pytest.mark.slow  # Prefect and the warehouse; the teacher engine itself answers in microseconds
def test_a_teacher_build_keeps_right_attempts_and_exports_their_steps(tmp_path):
    generate(WorldSpec(seed=0, questions=30, passages=400), tmp_path / "world")
    config = build_config(tmp_path / "world") | {
        "warehouse": {"root": str(tmp_path / "wh")},
        "llm": {"policy": {"backend": "world:r3-teacher", "options": {"world": str(tmp_path / "world")}}},
        "search": {
            "strategies": ["r3"],
            "questions_per_dataset": 8,
            "r3": {"n_attempts": 4, "min_queries": 1, "judge_outcome": False, "judge_relevance": False},
        },
    }
    summary = build(BuildConfig.model_validate(config), run_id="teacher")
    assert summary["status"] == "completed", summary["errors"]
    wh = Warehouse(tmp_path / "wh")
    answers = query(
        wh,
        "select n.question_id, n.is_selected, json_extract_string(n.parsed, '$.content') = q.golden_answers[1] as right"
        " from nodes n join questions q using (question_id) where n.kind = 'answer'",
    ).to_pylist()
    # attempt 0 (temperature 0) always answers right; best-of-N keeps one right attempt a question
    assert len({a["question_id"] for a in answers}) == 8
    assert all(a["right"] for a in answers if a["is_selected"])
    assert sum(a["is_selected"] for a in answers) == 8 and not all(a["right"] for a in answers)
    # attempt 3 samples at temperature 1, so its first step, held to a query, errs on every
    # question: it asks about an entity no gold step names, and the attempt ends wrong
    firsts = query(
        wh,
        "select json_extract_string(n.parsed, '$.content') as query, q.gold_plan[1].question as gold"
        " from nodes n join questions q using (question_id)"
        " where n.kind = 'sub_query' and n.path like '%/a3' and not n.is_selected",
    ).to_pylist()
    assert len(firsts) == 8 and all(f["query"] != f["gold"] for f in firsts)
    # one SFT row per step of each kept trajectory: its hops' queries, then its answer
    hops = query(
        wh,
        "select sum(len(q.gold_plan) + 1) as n from questions q where question_id in (select question_id from nodes)",
    ).to_pylist()[0]["n"]
    assert query(wh, "select count(*) as n from sft_examples").to_pylist()[0]["n"] == hops


@pytest.mark.slow  # Prefect and the warehouse; the teacher engine itself answers in microseconds
def test_a_teacher_mcts_build_pairs_right_steps_over_wrong_ones(tmp_path):
    generate(WorldSpec(seed=0, questions=30, passages=400), tmp_path / "world")
    config = build_config(tmp_path / "world") | {
        "warehouse": {"root": str(tmp_path / "wh")},
        "llm": {"policy": {"backend": "world:mcts-teacher", "options": {"world": str(tmp_path / "world")}}},
        "search": {"strategies": ["mcts"], "questions_per_dataset": 8, "mcts": {"temperature": 0.5, "metric": "em"}},
    }
    summary = build(BuildConfig.model_validate(config), run_id="teacher")
    assert summary["status"] == "completed", summary["errors"]
    pairs = query(
        Warehouse(tmp_path / "wh"),
        "select p.decision, p.chosen[1].content as chosen, p.rejected[1].content as rejected, p.gap,"
        " q.golden_answers[1] as answer, [s.answer for s in q.gold_plan] as hops"
        " from preference_pairs p join questions q using (question_id) order by p.pair_id",
    ).to_pylist()
    # the 8 questions' trees (2 lookups, 3 bridges, 2 comparisons, 1 chain) give 15 pairs
    assert [sum(p["decision"] == d for p in pairs) for d in ("query", "evidence", "answer")] == [9, 4, 2]
    assert all(p["gap"] > 0 for p in pairs)
    for pair in pairs:
        chosen, rejected = parse_turn(pair["chosen"]).fields, parse_turn(pair["rejected"]).fields
        if pair["decision"] == "query":  # searching preferred to answering at once, and wrongly
            assert chosen["action"] == "query" and rejected["action"] == "answer"
            assert rejected["content"] != pair["answer"]
        elif pair["decision"] == "evidence":  # the sentence that states a hop's answer, not another
            assert any(h in chosen["content"] and h not in rejected["content"] for h in pair["hops"])
        else:  # the evidence's answer
            assert (chosen["content"], rejected["action"]) == (pair["answer"], "answer")
            assert rejected["content"] != pair["answer"]


def test_the_world_nightly_config_builds_with_the_teacher_and_decides_on_the_mode_it_trains():
    config = NightlyConfig.model_validate(yaml.safe_load((REPO / "configs/world-nightly.yaml").read_text()))
    assert config.build.llm.policy.backend == "world:r3-teacher"
    assert config.build.llm.policy.options == {"world": "world"}
    assert [(d.path, d.partition) for d in config.build.datasets] == [
        (f"world/{split}.jsonl", split) for split in ("train", "valid", "test")
    ]
    assert (config.build.search.select, config.build.search.questions_per_night) == ("frontier", 40)
    assert (config.methods, config.mode, config.metric, config.evaluation.modes) == (["sft"], "r3", "em", ["r3"])
    assert (config.expand_with, config.window) == ("config", 2)  # new questions each night, three nights' rows
