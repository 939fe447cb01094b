"""User corpora in the Search-R1 / FlashRAG shape, and passage deduplication across datasets."""

from __future__ import annotations

import doctest
import gzip
import json

import pytest

from ragfactory.tasks.data import corpus as corpus_module
from ragfactory.tasks.data import passages as passages_module
from ragfactory.tasks.data.corpus import iter_corpus, load_corpus, parse_contents
from ragfactory.tasks.data.jsonl import NotJsonlError
from ragfactory.tasks.data.loaders import dedupe_passages, load_questions
from ragfactory.tasks.data.passages import passage_id
from ragfactory.warehouse.store import conform

CORPUS = [
    {"id": "0", "contents": '"Aaron"\nAaron is a prophet.'},
    {"id": 1, "contents": '""Hey Jude" (song)"\nA song by the Beatles.\nSecond line.'},
    {"id": "2", "contents": "A passage without a title line."},
    {"id": "3", "title": "Paris", "text": "Capital of France."},
    {"id": "0", "contents": '"Aaron"\nDuplicate id.'},
    {"contents": '"No id"\ntext'},
    {"id": "5", "contents": 7},
    {"id": "6", "contents": "  "},
    {"id": "7", "body": "neither contents nor text"},
    {"id": "8", "contents": '"Title only"'},
]
REASONS = {
    5: "duplicate id '0'",
    6: "missing field 'id'",
    7: "field 'contents' must be a string, got number",
    8: "empty field 'contents'",
    9: "missing field 'contents'",
}


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "wiki.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in CORPUS) + "\n", encoding="utf-8")
    return path


def test_search_r1_corpus_parses_titles_and_keeps_user_ids(corpus_file):
    result = load_corpus(corpus_file, "wiki")
    got = [(p["passage_id"], p["title"], p["text"]) for p in result.passages]
    assert got == [
        ("0", "Aaron", "Aaron is a prophet."),
        ("1", '"Hey Jude" (song)', "A song by the Beatles.\nSecond line."),
        ("2", "", "A passage without a title line."),
        ("3", "Paris", "Capital of France."),
        ("8", "", '"Title only"'),
    ]
    assert {p["source"] for p in result.passages} == {"wiki"}
    assert conform("passages", result.passages).num_rows == 5


def test_bad_corpus_rows_are_rejected_by_line(corpus_file):
    result = load_corpus(corpus_file, "wiki")
    assert {r["line"]: r["reason"] for r in result.rejects} == REASONS
    assert all(r["dataset"] == "wiki" for r in result.rejects)
    assert len(result.passages) + len(result.rejects) == len(CORPUS)
    assert conform("rejects", result.rejects).num_rows == len(REASONS)


@pytest.mark.parametrize("batch_size", [1, 2, 3, 100])
def test_iter_corpus_batches_cover_the_file_once(corpus_file, batch_size):
    batches = list(iter_corpus(corpus_file, "wiki", batch_size=batch_size))
    assert all(len(b.passages) <= batch_size for b in batches)
    whole = load_corpus(corpus_file, "wiki")
    assert [p for b in batches for p in b.passages] == whole.passages
    assert [r for b in batches for r in b.rejects] == whole.rejects


def test_gzip_corpus_is_read(tmp_path):
    path = tmp_path / "wiki-18.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(json.dumps(r) for r in CORPUS[:4]).encode()))
    assert [p["passage_id"] for p in load_corpus(path, "wiki").passages] == ["0", "1", "2", "3"]


def test_a_corpus_that_is_not_jsonl_names_the_file(tmp_path):
    path = tmp_path / "wiki.tsv"
    path.write_text("id\ttext\ttitle\n1\tsome text\tTitle\n", encoding="utf-8")
    with pytest.raises(NotJsonlError, match="wiki.tsv"):
        load_corpus(path, "wiki")


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        ('"T"\nbody', ("T", "body")),
        ('"T"\n', ("T", "")),
        ("plain\nbody", ("", "plain\nbody")),
        ('"unclosed\nbody', ("", '"unclosed\nbody')),
        ('  "T"  \n  body  ', ("T", "body")),
    ],
)
def test_parse_contents(contents, expected):
    assert parse_contents(contents) == expected


def test_passages_deduplicate_across_two_datasets_sharing_a_paragraph(tmp_path):
    # the same paragraph as HotpotQA spaces it (leading spaces) and as 2Wiki does (none)
    hotpot = {
        "_id": "h1",
        "question": "q",
        "answer": "a",
        "context": [["Shared", ["One.", " Two."]], ["Only hotpot", ["H."]]],
    }
    wiki = {
        "_id": "w1",
        "question": "q",
        "answer": "a",
        "context": [["Shared", ["One.", "Two."]], ["Only 2wiki", ["W."]]],
    }
    h_path, w_path = tmp_path / "h.jsonl", tmp_path / "w.jsonl"
    h_path.write_text(json.dumps(hotpot), encoding="utf-8")
    w_path.write_text(json.dumps(wiki), encoding="utf-8")
    h = load_questions(h_path, "hotpotqa")
    w = load_questions(w_path, "2wikimultihopqa")
    merged = dedupe_passages(h.passages + w.passages)
    assert [(p["title"], p["source"]) for p in merged] == [
        ("Shared", "hotpotqa"),
        ("Only hotpot", "hotpotqa"),
        ("Only 2wiki", "2wikimultihopqa"),
    ]
    assert merged[0]["passage_id"] == passage_id("Shared", "One. Two.")
    h_meta, w_meta = (json.loads(r.questions[0]["metadata"]) for r in (h, w))
    assert h_meta["passage_ids"][0] == w_meta["passage_ids"][0] == merged[0]["passage_id"]


def test_passage_ids_depend_on_title_and_text():
    assert passage_id("A", "x") == passage_id("A", "x")
    assert len({passage_id("A", "x"), passage_id("B", "x"), passage_id("A", "y"), passage_id("A\nx", "")}) == 4
    assert len(passage_id("A", "x")) == 16


@pytest.mark.parametrize("module", [corpus_module, passages_module])
def test_docstring_examples_run(module):
    assert doctest.testmod(module).failed == 0


def test_seen_ids_find_repeats_across_merges_into_the_sorted_array():
    from ragfactory.tasks.data.corpus import SeenIds

    seen = SeenIds(recent_limit=2)  # every second new id moves the recent set into the array
    firsts = [seen.add(pid) for pid in ["a", "b", "c", "a", "b", "c", "d"]]
    assert firsts == [True, True, True, False, False, False, True]
    assert len(seen) == 4 and len(seen.sorted) == 4 and seen.recent == set()
    assert seen.sorted.tolist() == sorted(seen.sorted.tolist())


def test_a_corpus_ingests_one_shard_per_batch_and_again_changes_nothing(corpus_file, tmp_path, prefect_api):
    from ragfactory.tasks.ingest import ingest_corpus
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(tmp_path / "wh")
    first = ingest_corpus(str(wh.root), str(corpus_file), batch_size=2)
    assert (first["passages"], first["rejects"]) == (5, 5)
    shards = sorted(p.name for p in wh.files("passages"))
    assert shards == ["corpus-00000.parquet", "corpus-00001.parquet", "corpus-00002.parquet"]
    ids = query(wh, "select passage_id from passages order by 1").column("passage_id").to_pylist()
    assert ids == ["0", "1", "2", "3", "8"]
    stamps = {p: p.stat().st_mtime_ns for p in wh.files("passages")}
    again = ingest_corpus(str(wh.root), str(corpus_file), batch_size=2)
    assert again["cached"] is True and {p: p.stat().st_mtime_ns for p in wh.files("passages")} == stamps
