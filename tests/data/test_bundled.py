"""The four bundled dev samples load completely, fit the warehouse schemas, keep their quirks."""

from __future__ import annotations

import json
import re

import pytest

from ragfactory.tasks.data.loaders import (
    bundled_names,
    bundled_path,
    dedupe_passages,
    load_bundled,
    load_questions,
)
from ragfactory.warehouse.store import conform

COUNTS = {"bamboogle": 125, "hotpotqa": 500, "musique": 234, "2wikimultihopqa": 500}


@pytest.fixture(scope="module")
def loaded():
    return {name: load_bundled(name) for name in COUNTS}


def test_bundled_names_are_the_four_benchmarks():
    assert bundled_names() == sorted(COUNTS)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_bundled_file_loads_every_row(loaded, name):
    result = loaded[name]
    assert len(result.questions) == COUNTS[name]
    assert result.rejects == []
    ids = [q["question_id"] for q in result.questions]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith(f"{name}:") for i in ids)
    assert [q["source_line"] for q in result.questions] == list(range(1, COUNTS[name] + 1))
    assert all(q["source_file"] == str(bundled_path(name)) for q in result.questions)


@pytest.mark.parametrize("name", sorted(COUNTS))
@pytest.mark.parametrize("table", ["questions", "passages", "rejects"])
def test_bundled_rows_fit_the_warehouse_schema(loaded, name, table):
    rows = getattr(loaded[name], table)
    assert conform(table, rows).num_rows == len(rows)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_answers_and_questions_are_stripped(loaded, name):
    for q in loaded[name].questions:
        assert q["question"] == q["question"].strip() and q["question"]
        assert q["golden_answers"] and all(a == a.strip() and a for a in q["golden_answers"])
        assert len(set(q["golden_answers"])) == len(q["golden_answers"])


def test_bamboogle_trailing_newline_answer_is_stripped(loaded):
    answers = [q["golden_answers"] for q in loaded["bamboogle"].questions]
    assert ["George VI"] in answers
    raw = bundled_path("bamboogle").read_text(encoding="utf-8")
    assert '"George VI\\n"' in raw  # the quirk is in the file, so the strip is what removes it


def test_bamboogle_ids_come_from_line_numbers(loaded):
    questions = loaded["bamboogle"].questions
    assert questions[0]["question_id"] == "bamboogle:1"
    assert questions[-1]["question_id"] == "bamboogle:125"
    assert loaded["bamboogle"].passages == []


@pytest.mark.parametrize(
    ("name", "plan"), [("musique", True), ("hotpotqa", False), ("2wikimultihopqa", False), ("bamboogle", False)]
)
def test_only_musique_has_gold_plans(loaded, name, plan):
    assert all((q["gold_plan"] is not None) == plan for q in loaded[name].questions)


def test_musique_gold_plan_has_one_step_per_hop(loaded):
    for q in loaded["musique"].questions:
        hops = int(re.match(r"musique:(\d)hop", q["question_id"]).group(1))
        plan = q["gold_plan"]
        assert len(plan) == hops, q["question_id"]
        assert [s["step"] for s in plan] == list(range(1, hops + 1))
        assert plan[-1]["answer"].strip() and all(s["question"] for s in plan)


def test_musique_keeps_hash_references_and_aliases(loaded):
    by_id = {q["question_id"]: q for q in loaded["musique"].questions}
    first = by_id["musique:2hop__327688_56873"]
    assert [s["question"] for s in first["gold_plan"]] == [
        "Craig Westcarr >> member of sports team",
        "when did #1 win the fa cup",
    ]
    assert first["gold_plan"][1]["paragraph_support_idx"] == 15
    with_refs = [q for q in by_id.values() if any("#1" in s["question"] for s in q["gold_plan"])]
    assert len(with_refs) > 200
    raw = [json.loads(line) for line in bundled_path("musique").read_text().splitlines()]
    with_aliases = [r for r in raw if r["answer_aliases"]]
    assert with_aliases
    for r in with_aliases:
        answers = by_id[f"musique:{r['id']}"]["golden_answers"]
        assert answers[0] == r["answer"].strip()
        assert set(answers) == {a.strip() for a in [r["answer"], *r["answer_aliases"]]}


def test_musique_metadata_points_at_supporting_passages(loaded):
    result = loaded["musique"]
    ids = {p["passage_id"] for p in result.passages}
    for q in result.questions:
        meta = json.loads(q["metadata"])
        assert set(meta["passage_ids"]) <= ids
        for step in q["gold_plan"]:
            supporting = meta["passage_ids"][step["paragraph_support_idx"]]
            assert supporting in meta["supporting_passage_ids"]


@pytest.mark.parametrize(("name", "joiner"), [("hotpotqa", ""), ("2wikimultihopqa", " ")])
def test_context_sentences_are_joined_as_the_dataset_spaces_them(loaded, name, joiner):
    record = json.loads(bundled_path(name).read_text(encoding="utf-8").splitlines()[0])
    by_title = {p["title"]: p["text"] for p in loaded[name].passages}
    for title, sentences in record["context"]:
        assert by_title[title] == joiner.join(sentences).strip()


def test_hotpotqa_metadata_keeps_supporting_facts(loaded):
    q = loaded["hotpotqa"].questions[0]
    meta = json.loads(q["metadata"])
    assert meta["type"] == "bridge" and meta["level"] == "hard"
    assert ["Moscow State University", 3] in meta["supporting_facts"]
    assert len(meta["passage_ids"]) == 10


@pytest.mark.parametrize("limit", [0, 1, 7])
def test_limit_keeps_the_first_good_rows_and_their_passages(limit):
    result = load_bundled("hotpotqa", limit=limit)
    full = load_bundled("hotpotqa")
    assert result.questions == full.questions[:limit]
    wanted = {pid for q in result.questions for pid in json.loads(q["metadata"])["passage_ids"]}
    assert {p["passage_id"] for p in result.passages} == wanted


def test_negative_limit_is_refused():
    with pytest.raises(ValueError, match="limit"):
        load_bundled("musique", limit=-1)


def test_passages_are_unique_within_and_across_datasets(loaded):
    everything = [p for result in loaded.values() for p in result.passages]
    for result in loaded.values():
        ids = [p["passage_id"] for p in result.passages]
        assert len(ids) == len(set(ids))
    unique = dedupe_passages(everything)
    assert len({(p["title"], p["text"]) for p in everything}) == len(unique)


def test_unknown_bundled_name_lists_the_bundled_ones():
    with pytest.raises(ValueError, match="bundled: 2wikimultihopqa, bamboogle, hotpotqa, musique"):
        bundled_path("nq")


def test_unknown_format_lists_the_formats():
    with pytest.raises(ValueError, match="known formats: hotpotqa, 2wikimultihopqa"):
        load_questions(bundled_path("musique"), "musique", fmt="squad")
