import os

import pytest

from ragfactory.tasks.retrieval.bm25 import BM25Params, BM25Retriever, load_or_build_bm25
from ragfactory.tasks.retrieval.config import BM25Config
from ragfactory.tasks.retrieval.types import Retriever

from .conftest import assert_ranked


@pytest.fixture
def retriever(passages):
    return BM25Retriever.build(passages)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("guanciale", "p-pasta"),
        ("Which luthier made it?", "p-violin"),
        ("Krakatoa eruption", "p-volcano"),
        ("Patagonia", "p-glacier"),
        ("Kasparov", "p-chess"),  # a title-only word: titles are indexed with the text
    ],
)
def test_rare_term_finds_its_passage(retriever, query, expected):
    [hits] = retriever.search([query], k=3)
    assert hits[0].passage_id == expected


def test_stemming_matches_other_word_forms(retriever):
    [hits] = retriever.search(["rivers flowing"], k=1)
    assert hits[0].passage_id == "p-river"


def test_batched_search_returns_one_ranked_list_per_query(retriever):
    queries = [
        "Paris tower violin",
        "penguin bird river",
        "coffee water Black Sea",
        "Moon 1969 chess",
    ]
    rows = retriever.search(queries, k=2)
    assert_ranked(rows, n_queries=4, k=2)
    assert [row[0].passage_id for row in rows] == ["p-eiffel", "p-penguin", "p-coffee", "p-moon"]
    assert isinstance(retriever, Retriever)


def test_passages_sharing_no_word_are_left_out(retriever):
    rows = retriever.search(["zzzunknownzzz", "the of and", "Danube", ""], k=5)
    assert rows[0] == [] and rows[1] == [] and rows[3] == []
    assert [h.passage_id for h in rows[2]] == ["p-river"]


def test_k_larger_than_corpus_returns_every_match(retriever):
    [hits] = retriever.search(["Paris river Moon coffee"], k=50)
    assert sorted(h.passage_id for h in hits) == ["p-coffee", "p-eiffel", "p-moon", "p-river"]


def test_empty_batch_and_bad_k(retriever):
    assert retriever.search([], k=3) == []
    with pytest.raises(ValueError, match="k must be"):
        retriever.search(["x"], k=0)


def index_mtimes(folder):
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_load_or_build_round_trip_does_not_rebuild(passages, tmp_path):
    queries = ["Paris tower", "volcano eruption heard", "chess champion"]
    first = load_or_build_bm25(passages, tmp_path, BM25Config())
    assert first.is_loaded is False
    stamps = index_mtimes(first.index_dir)
    second = load_or_build_bm25(passages, tmp_path, BM25Config())
    assert second.is_loaded is True
    assert second.index_dir == first.index_dir
    assert index_mtimes(second.index_dir) == stamps
    assert second.search(queries, k=3) == first.search(queries, k=3)
    assert [p.name for p in tmp_path.iterdir()] == [first.index_dir.name]


@pytest.mark.parametrize("changed", [BM25Params(k1=1.2), BM25Params(stemmer=None)])
def test_other_parameters_get_their_own_index(passages, tmp_path, changed):
    default = load_or_build_bm25(passages, tmp_path)
    other = load_or_build_bm25(passages, tmp_path, changed)
    assert other.is_loaded is False
    assert other.index_dir != default.index_dir
    assert other.params == changed


def test_changed_passages_get_their_own_index(passages, tmp_path):
    first = load_or_build_bm25(passages, tmp_path)
    second = load_or_build_bm25(passages.slice(0, 5), tmp_path)
    assert second.is_loaded is False and second.index_dir != first.index_dir
    assert second.search(["Patagonia"], k=3) == [[]]


def test_config_values_reach_the_index(passages):
    retriever = BM25Retriever.build(passages, BM25Params.from_config(BM25Config(k1=0.9, b=0.4)))
    assert (retriever.params.k1, retriever.params.b) == (0.9, 0.4)


def test_loaded_index_needs_no_warehouse(passages, tmp_path):
    built = load_or_build_bm25(passages, tmp_path)
    loaded = BM25Retriever.load(built.index_dir)
    [hits] = loaded.search(["espresso"], k=1)
    assert (hits[0].passage_id, hits[0].title) == ("p-coffee", "Espresso")
    assert os.path.isfile(built.index_dir / "passages.arrow")
