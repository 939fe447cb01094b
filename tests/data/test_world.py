"""The seeded world: invented names, facts its reader finds, entity-disjoint splits, rows the build
ingests, and questions an oracle answers exactly by following their gold decompositions through BM25."""

from __future__ import annotations

import doctest
import json
import re

import pyarrow as pa
import pytest

from ragfactory.tasks.data.config import DatasetConfig, PartitionConfig
from ragfactory.tasks.data.corpus import load_corpus
from ragfactory.tasks.data.loaders import load_questions
from ragfactory.tasks.data.world import RELATIONS, SPLITS, WorldSpec, generate, read_fact
from ragfactory.tasks.data.world import facts as facts_module
from ragfactory.tasks.data.world.names import SYLLABLES, NameKind, Namer
from ragfactory.tasks.data.world.oracle import oracle_answer
from ragfactory.tasks.retrieval.bm25 import BM25Retriever


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("world")
    manifest = generate(WorldSpec(seed=0, questions=120, passages=1500), out)
    return out, manifest


def rows(out, split):
    return [json.loads(line) for line in (out / f"{split}.jsonl").read_text().splitlines()]


def test_a_name_is_its_index_in_syllables():
    # 18 onsets x 7 vowels x 7 codas; index 1 of a one-word, two-syllable kind: digit 1 then 0
    assert len(SYLLABLES) == 882 and SYLLABLES[:2] == ("ba", "ban")
    kind = NameKind(words=(2,))
    assert kind.name(0) == "Baba" and kind.name(1) == "Banba" and kind.name(882) == "Baban"
    assert NameKind(words=(2,), suffixes=("mere", "holt")).name(3) == "Banbaholt"


def test_names_are_distinct_per_kind_and_seeded():
    namer = Namer(0)
    for kind in ("person", "city", "country", "company"):
        names = [namer.name(kind, i) for i in range(20_000)]
        assert len(set(names)) == len(names), kind
    # golden names of seed 0: a change here renames every world
    assert [namer.name("person", i) for i in range(2)] == ["Drussaeth Quunbon", "Kixthos Thesboth"]
    assert [namer.name("city", 0), namer.name("country", 0), namer.name("company", 0)] == [
        "Saesgunholt",
        "Paesaesia",
        "Tangun Shipping",
    ]
    assert Namer(1).name("person", 0) != namer.name("person", 0)
    with pytest.raises(ValueError, match="room for"):
        namer.name("country", 10**9)


def test_the_reader_finds_every_sentence_form():
    assert doctest.testmod(facts_module).failed == 0
    for relation in RELATIONS.values():
        obj = "1954" if relation.object == "year" else "Drelmere Vale"
        for sentence in relation.sentences:
            text = "Tharo Vekin is fond of old maps. " + sentence.format(s="Tharo Vekin", o=obj)
            assert read_fact(text, "Tharo Vekin", relation.name) == obj, sentence
            assert read_fact(text, "Other Name", relation.name) is None
    # a year is not a city, a city is not a year: one sentence per relation
    assert read_fact("Tharo Vekin was born in the year 1954.", "Tharo Vekin", "born_in") is None
    assert read_fact("Tharo Vekin was born in Drelmere.", "Tharo Vekin", "born_year") is None


def test_the_world_has_its_sizes_and_rungs(world):
    out, manifest = world
    # 120 questions at 0.6 / 0.15 / 0.25: 18 valid, 30 test, the rest train; rungs in turn
    assert {s: len(rows(out, s)) for s in SPLITS} == {"train": 72, "valid": 18, "test": 30}
    assert manifest["questions"]["train"] == {"lookup": 18, "bridge": 18, "comparison": 18, "chain": 18}
    assert manifest["passages"]["total"] == 1500
    assert len((out / "corpus.jsonl").read_text().splitlines()) == 1500
    hops = {r["rung"]: len(r["question_decomposition"]) for r in rows(out, "train")}
    assert hops == {"lookup": 1, "bridge": 2, "comparison": 2, "chain": 3}
    again = out.parent / "again"
    generate(WorldSpec(seed=0, questions=120, passages=1500), again)
    assert (again / "test.jsonl").read_bytes() == (out / "test.jsonl").read_bytes()


def test_splits_share_no_entity(world):
    out, _ = world
    entities = {s: {e for r in rows(out, s) for e in r["entities"]} for s in SPLITS}
    assert entities["train"] and entities["test"]
    assert not entities["train"] & (entities["valid"] | entities["test"])
    assert not entities["valid"] & entities["test"]
    # nor does a held-out entity's name occur in any train question or decomposition
    train_text = " ".join(r["question"] + " " + json.dumps(r["question_decomposition"]) for r in rows(out, "train"))
    assert not [e for e in entities["test"] if e in train_text]


def test_bridge_steps_refer_to_earlier_answers(world):
    out, _ = world
    bridge = next(r for r in rows(out, "train") if r["rung"] == "chain")
    steps = bridge["question_decomposition"]
    assert "#1" in steps[1]["question"] and "#2" in steps[2]["question"]
    assert steps[-1]["answer"] == bridge["answer"]
    for step in steps:
        paragraph = bridge["paragraphs"][step["paragraph_support_idx"]]
        assert paragraph["is_supporting"] and step["answer"] in paragraph["paragraph_text"]


def test_rows_ingest_with_gold_plans_and_their_passages_in_the_corpus(world):
    out, _ = world
    corpus = load_corpus(out / "corpus.jsonl", "world")
    assert corpus.rejects == []
    ids = {p["passage_id"] for p in corpus.passages}
    for split in SPLITS:
        loaded = load_questions(out / f"{split}.jsonl", "world", "world", split=split)
        assert loaded.rejects == [] and len(loaded.questions) == len(rows(out, split))
        for q in loaded.questions:
            metadata = json.loads(q["metadata"])
            assert metadata["partition"] == split and metadata["hops"] == len(q["gold_plan"])
            assert set(metadata["supporting_passage_ids"]) <= ids
        # the build config gives each file its own partition
        config = DatasetConfig(name="world", format="world", path=str(out / f"{split}.jsonl"), partition=split)
        assert PartitionConfig().rule_for(config).fixed == split


def test_the_oracle_answers_every_question_through_bm25(world):
    out, _ = world
    _oracle_answers_every_question(out)


def _oracle_answers_every_question(out):
    corpus = load_corpus(out / "corpus.jsonl", "world")
    retriever = BM25Retriever.build(pa.Table.from_pylist(corpus.passages))
    for split in SPLITS:
        for row in rows(out, split):
            steps = [s["question"] for s in row["question_decomposition"]]
            relations = [s["relation"] for s in row["question_decomposition"]]
            answer = oracle_answer(retriever, steps, relations, row["rung"], top_k=3)
            assert answer.answer == row["answer"], row["question"]
            assert answer.searches == len(steps)


def test_mentions_put_a_second_city_year_and_company_in_a_passage_and_the_oracle_still_reads_the_fact(world, tmp_path):
    out, _ = world
    generate(WorldSpec(seed=0, questions=120, passages=1500, mentions=True), tmp_path)
    # the same questions and answers as the world without mentions: only the passages differ
    for split in SPLITS:
        assert [(r["id"], r["question"], r["answer"]) for r in rows(tmp_path, split)] == [
            (r["id"], r["question"], r["answer"]) for r in rows(out, split)
        ]
    row = rows(tmp_path, "test")[12]
    assert (row["question"], row["answer"]) == ("In which city was Ruthputh Daervith born?", "Vulsuxford")
    [passage] = [p["paragraph_text"] for p in row["paragraphs"] if p["is_supporting"]]
    # its three facts, the filler, and a second company (Tyrrael Dynamics), city and year
    assert passage == (
        "Ruthputh Daervith's birthplace is Vulsuxford. Ruthputh Daervith once did business with Tyrrael Dynamics. "
        "Ruthputh Daervith is an employee of Bisskix Works. Friends describe Ruthputh Daervith as patient. "
        "Ruthputh Daervith is well known in Mathgasgard. Ruthputh Daervith was born in the year 1902. "
        "Ruthputh Daervith was in the papers in 1998."
    )
    assert read_fact(passage, "Ruthputh Daervith", "born_in") == "Vulsuxford"
    assert read_fact(passage, "Ruthputh Daervith", "works_for") == "Bisskix Works"
    assert read_fact(passage, "Ruthputh Daervith", "born_year") == "1902"
    _oracle_answers_every_question(tmp_path)


def test_without_the_supporting_passages_the_oracle_answers_nothing(world):
    out, _ = world
    held = {p["title"] for r in rows(out, "test") for p in r["paragraphs"] if p["is_supporting"]}
    corpus = [p for p in load_corpus(out / "corpus.jsonl", "world").passages if p["title"] not in held]
    retriever = BM25Retriever.build(pa.Table.from_pylist(corpus))
    for row in rows(out, "test"):
        steps = [s["question"] for s in row["question_decomposition"]]
        relations = [s["relation"] for s in row["question_decomposition"]]
        assert oracle_answer(retriever, steps, relations, row["rung"]).answer is None


def test_a_spec_out_of_range_names_its_field(tmp_path):
    with pytest.raises(ValueError, match=re.escape("passages must be 0 or >= ")):
        WorldSpec(questions=100, passages=10)
    with pytest.raises(ValueError, match="shares must be three positive numbers"):
        WorldSpec(shares=(1.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="rungs must be some of lookup, bridge, comparison, chain"):
        WorldSpec(rungs=("lookup", "fourhop"))
    with pytest.raises(ValueError, match="questions must be >= 3"):
        WorldSpec(questions=2)
    assert not (tmp_path / "never").exists()


def test_the_world_command_writes_a_world_and_refuses_a_bad_size(tmp_path):
    from typer.testing import CliRunner

    from ragfactory.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["world", "--seed", "3", "--questions", "40", str(tmp_path / "w")])
    assert result.exit_code == 0, result.output
    assert "train: 24 questions (6 lookup, 6 bridge, 6 comparison, 6 chain)" in result.output
    config = (tmp_path / "w" / "build.yaml").read_text()
    assert "format: world" in config and "from_datasets: false" in config
    mentioned = runner.invoke(app, ["world", "--seed", "3", "--questions", "40", "--mentions", str(tmp_path / "m")])
    assert mentioned.exit_code == 0, mentioned.output
    assert json.loads((tmp_path / "m" / "world.json").read_text())["spec"]["mentions"] is True
    bad = runner.invoke(app, ["world", "--questions", "40", "--passages", "9", str(tmp_path / "bad")])
    assert bad.exit_code == 1 and bad.output.startswith("error: world: passages must be 0 or >= ")
    assert not (tmp_path / "bad").exists()
