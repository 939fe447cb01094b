"""The BM25 index built batch by batch: hand-worked scores, the batch and token-group logic, and
the acceptance check that it answers exactly as bm25s's single-pass index over the same corpus."""

import bm25s
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ragfactory.tasks.retrieval.bm25 import BM25Params, BM25Retriever, bm25_settings, load_stemmer
from ragfactory.tasks.retrieval.bm25_build import BuildLimits, Stems, token_groups
from ragfactory.tasks.retrieval.index_store import TablePassages, content_key


def table(texts, titles=None):
    return pa.table(
        {"passage_id": [f"d{i}" for i in range(len(texts))], "title": titles or [""] * len(texts), "text": texts}
    )


TINY = table(["apple banana", "apple apple cherry", "cherry"])
PLAIN = BM25Params(stemmer=None)  # surface forms, so the hand-worked tokens are the words


@pytest.mark.parametrize("batch_rows", [1, 2, 3])
@pytest.mark.parametrize("group_entries", [1, 100])
def test_scores_match_hand_worked_lucene_bm25(batch_rows, group_entries):
    # N = 3 passages of lengths 2, 3, 1 (average 2); df(apple) = df(cherry) = 2, df(banana) = 1.
    # idf = ln(1 + (N - df + .5) / (df + .5)): apple, cherry ln 1.6 = 0.470004; banana ln 2.6667.
    # tf part = tf / (1.5 * (0.25 + 0.75 * len / 2) + tf):
    #   d0 apple 1/2.5 = 0.4 -> 0.188001; d1 apple 2/4.0625 -> 0.231386;
    #   d2 cherry 1/1.9375 -> 0.242583; d1 cherry 1/3.0625 -> 0.153471.
    index = BM25Retriever.build(TablePassages(TINY, batch_rows), PLAIN, BuildLimits(group_entries))
    apple, cherry, both = index.search(["apple", "cherry", "apple cherry"], k=3)
    assert [(h.passage_id, round(h.score, 6)) for h in apple] == [("d1", 0.231386), ("d0", 0.188001)]
    assert [(h.passage_id, round(h.score, 6)) for h in cherry] == [("d2", 0.242583), ("d1", 0.153471)]
    assert [(h.passage_id, round(h.score, 6)) for h in both] == [("d1", 0.384857), ("d2", 0.242583), ("d0", 0.188001)]


def test_tokens_are_numbered_in_sorted_order_with_one_column_each():
    index = BM25Retriever.build(TablePassages(TINY, 1), PLAIN, BuildLimits(1))
    assert [index.vocab[i] for i in range(len(index.vocab))] == ["apple", "banana", "cherry"]
    assert index.vocab.get("banana") == 1 and index.vocab.get("durian") is None
    assert index.indptr.tolist() == [0, 2, 3, 5]  # apple in d0, d1; banana in d0; cherry in d1, d2
    assert index.indices.tolist() == [0, 1, 0, 1, 2]


@pytest.mark.parametrize(
    ("df", "entries", "expected"),
    [
        ([3, 1, 4, 1, 5], 4, [0, 0, 1, 2, 2]),  # starts 0, 3, 4, 8, 9 -> // 4
        ([10, 1, 1], 4, [0, 2, 2]),  # a token over the limit is a group of its own
        ([1, 1, 1], 100, [0, 0, 0]),
    ],
)
def test_token_groups_cut_by_entries_before_each_token(df, entries, expected):
    assert token_groups(np.array(df), entries).tolist() == expected


def test_content_key_does_not_depend_on_batches():
    whole = content_key(TINY, {"k1": 1.5})
    assert content_key(TablePassages(TINY, 1), {"k1": 1.5}) == whole
    assert content_key(TablePassages(TINY, 2), {"k1": 1.5}) == whole
    assert content_key(TINY.slice(0, 2), {"k1": 1.5}) != whole


def test_non_sparse_methods_are_refused():
    with pytest.raises(ValueError, match="'bm25l' is not sparse"):
        BM25Retriever.build(TINY, BM25Params(method="bm25l"))


def synthetic_corpus(n: int, seed: int = 7) -> pa.Table:
    """``n`` passages of 3-11 words drawn Zipf-like from 5,000 made-up words; every 97th passage
    repeats an earlier one's text, so equal scores (ties) occur."""
    rng = np.random.default_rng(seed)
    weights = 1 / np.arange(1, 5001)
    words = pa.array([f"w{i}x" for i in range(5000)]).take(
        pa.array(rng.choice(5000, size=n * 11, p=weights / weights.sum()))
    )
    lengths = rng.integers(3, 12, n)
    offsets = pa.array(np.r_[0, np.cumsum(lengths)].astype(np.int32))
    texts = pc.binary_join(pa.ListArray.from_arrays(offsets, words.slice(0, int(lengths.sum()))), " ")
    repeated = np.arange(n)
    repeated[::97] //= 2
    titles = pc.binary_join_element_wise("t", pa.array((np.arange(n) % 50).astype(str)), "")
    return pa.table(
        {
            "passage_id": pa.array([f"p{i:07d}" for i in range(n)]),
            "title": titles,
            "text": texts.take(pa.array(repeated)),
        }
    )


def single_pass_top3(passages: pa.Table, queries: list[str], params: BM25Params) -> list[list]:
    """Top-3 (id, score) per query from bm25s's single-pass index over the whole corpus, the way
    ``BM25Retriever`` indexed before it built in batches."""
    stemmer, _ = load_stemmer(params.stemmer)
    docs = [f"{t}\n{x}" for t, x in zip(passages["title"].to_pylist(), passages["text"].to_pylist())]
    tokens = bm25s.tokenize(docs, stopwords=params.stopwords, stemmer=stemmer, return_ids=True, show_progress=False)
    index = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
    index.index(tokens, show_progress=False)
    words = bm25s.tokenize(queries, stopwords=params.stopwords, stemmer=stemmer, return_ids=False, show_progress=False)
    ids = [[index.vocab_dict[w] for w in q if w and w in index.vocab_dict] for q in words]
    found = index.retrieve(ids, k=3, show_progress=False, n_threads=0)
    names = passages["passage_id"]
    return [
        [(names[int(d)].as_py(), float(s)) for d, s in zip(docs_q, scores_q)]
        for docs_q, scores_q in zip(found.documents, found.scores)
    ]


@pytest.mark.slow
def test_batched_index_of_200k_passages_answers_as_the_single_pass_index():
    passages = synthetic_corpus(200_000)
    rng = np.random.default_rng(11)
    queries = [" ".join(f"w{int(w)}x" for w in rng.zipf(1.3, 3) % 5000) for _ in range(100)]
    # Batches of 30,000 passages (7 of them) and token groups of 100,000 entries (~13 groups).
    batched = BM25Retriever.build(TablePassages(passages, 30_000), BM25Params(), BuildLimits(100_000))
    got = [[(h.passage_id, h.score) for h in row] for row in batched.search(queries, k=3)]
    assert got == single_pass_top3(passages, queries, BM25Params())
    assert sum(len(row) == 3 for row in got) >= 90  # the queries do match passages


def test_an_index_over_the_warehouse_opens_again_without_reading_a_passage(tmp_path):
    from ragfactory.tasks.retrieval.config import RetrievalConfig
    from ragfactory.tasks.retrieval.corpus import CorpusRead, WarehousePassages, open_retriever
    from ragfactory.warehouse.store import Warehouse

    class Unreadable(WarehousePassages):
        def batches(self):
            raise AssertionError("the corpus was read")

    wh = Warehouse(tmp_path / "wh")
    rows = [
        {"passage_id": f"d{i}", "source": "wiki", "title": "", "text": t}
        for i, t in enumerate(TINY["text"].to_pylist())
    ]
    wh.write("passages", rows[:2], "corpus-00000")
    wh.write("passages", rows[2:], "corpus-00001")
    source = WarehousePassages(wh, ["wiki"], CorpusRead(batch_rows=2))
    assert [b.num_rows for b in source.batches()] == [2, 1]
    config = RetrievalConfig()
    built = open_retriever(wh, ["wiki"], config, passages=source)
    opened = open_retriever(wh, ["wiki"], config, passages=Unreadable(wh, ["wiki"]))
    assert (built.is_loaded, opened.is_loaded, opened.index_dir) == (False, True, built.index_dir)
    assert built.index_dir.name == "bm25-" + content_key(TINY, bm25_settings(BM25Params()))
    assert [h.passage_id for h in opened.search(["cherry"], k=3)[0]] == ["d2", "d1"]


@pytest.mark.parametrize(
    ("scores", "rows", "best"),
    [
        ([0, 0.5, 0, 2.0, 1.0, 0.25], [3, 4, 1], [2.0, 1.0, 0.5]),  # passages sharing a word, best first
        ([0, 0.5, 0, 0, 0, 0], [1, -1, -1], [0.5, 0, 0]),  # fewer matches than k: the rest are -1
        ([1.0, 0, 1.0, 3.0, 0.5, 0], None, None),
    ],  # a tie at the k-th place: bm25s's own selection
)
def test_top_k_selects_among_matching_passages_as_bm25s_does(scores, rows, best):
    from bm25s.selection import topk

    from ragfactory.tasks.retrieval.bm25 import top_k

    values = np.array(scores, dtype=np.float32)
    got_scores, got_rows = top_k(values, 3)
    if rows is None:
        rows_expected, best_expected = topk(values, k=3, sorted=True, backend="numpy")[::-1]
        rows, best = rows_expected.tolist(), best_expected.tolist()
    assert got_rows.tolist() == rows and got_scores.tolist() == best


def test_rows_are_taken_from_their_own_batches():
    from ragfactory.tasks.retrieval.index_store import take_rows

    parts = [table(["a", "b"]), table(["c"]), table(["d", "e", "f"])]
    chunked = pa.concat_tables(
        [p.set_column(0, "passage_id", pa.array([f"{i}{j}" for j in range(p.num_rows)])) for i, p in enumerate(parts)]
    )
    taken = take_rows(chunked, np.array([5, 0, 2, 3]))
    assert taken["passage_id"] == ["22", "00", "10", "20"]
    assert taken["text"] == ["f", "a", "c", "d"]


def test_a_word_is_stemmed_once_while_the_kept_stems_fit():
    asked: list[list[str]] = []

    class Stemmer:
        def stemWords(self, words):  # noqa: N802 (the Snowball stemmers' own name)
            asked.append(list(words))
            return [w.rstrip("s") for w in words]

    stems = Stems(Stemmer(), limit=3)
    assert stems(["cats", "dogs", "cats"]) == ["cat", "dog", "cat"]
    assert stems(["dogs", "birds"]) == ["dog", "bird"]
    assert asked == [["cats", "dogs", "cats"], ["birds"]]
    stems(["cows"])  # 3 kept: one more still fits the limit's check
    stems(["dogs"])  # 4 kept, past the limit: forgotten first, so asked again
    assert asked[-2:] == [["cows"], ["dogs"]]
    assert Stems(None, limit=3)(["cats"]) == ["cats"]


def test_queries_stem_through_the_kept_stems_as_the_stemmer_would():
    # Stemmed: d0 "Running runs fast" -> run run fast (3 tokens), d1 "Cats cat" -> cat cat (2);
    # average length 2.5, df 1 each of N = 2: idf ln 2 = 0.693147. tf part 2 / (1.5 * (0.25 +
    # 0.75 * len / 2.5) + 2): d0 2 / 3.725 -> 0.372160, d1 2 / 3.275 -> 0.423296.
    index = BM25Retriever.build(table(["runs fast", "cat"], ["Running", "Cats"]))
    for _ in range(2):  # the second time from the kept stems
        hits = index.search(["running cats", "cat running"], k=2)
        assert [[(h.passage_id, round(h.score, 6)) for h in q] for q in hits] == [
            [("d1", 0.423296), ("d0", 0.37216)]
        ] * 2
    stemmer, _ = load_stemmer("english")
    assert index._stems(["running", "cats"]) == stemmer.stemWords(["running", "cats"]) == ["run", "cat"]
