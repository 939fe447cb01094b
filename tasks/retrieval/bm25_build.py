"""Build a BM25 index batch by batch, so no process ever holds the corpus or its whole matrix.

The index is the one bm25s builds in a single pass (the sparse retriever of R3-RAG
(docs/papers.md), and of Search-R1's Pyserini setup): a (passages x tokens)
matrix of precomputed Lucene BM25 scores in compressed-sparse-column form, one column per token.
A score needs two corpus-wide numbers, the average passage length and the token's document
frequency, so the build makes two passes over what one batch produced:

1. ``count``: tokenise a batch (bm25s's own tokenizer, stopwords and stemmer), count each
   (passage, token) pair, add to the document frequencies, spill the counts to disk.
2. ``score``: with the totals known, score each spilled batch with bm25s's own formulas (so every
   float is the one bm25s computes) and append its entries to one file per range of tokens.
3. ``columns``: sort each token range's entries by token (stably: passages stay in order) and
   append them to the final ``data`` / ``indices`` arrays, written as ``.npy`` files.

Memory is one batch's counts, one token range (``BuildLimits.group_entries``) and the
vocabulary, which grows far slower than the corpus. Tokens are numbered in sorted order, so a
query looks its words up by binary search in the memory-mapped vocabulary (``bm25.py``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import pyarrow as pa
from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

DATA_FILE, INDICES_FILE, INDPTR_FILE = "data.npy", "indices.npy", "indptr.npy"
VOCAB_FILE, STATS_FILE = "vocab.arrow", "stats.json"
SCORE_DTYPE, INT_DTYPE = np.float32, np.int32  # bm25s's defaults: the same floats, half the bytes
# bm25l and bm25+ add a per-token score to passages lacking the token: not a sparse matrix.
SPARSE_METHODS = ("lucene", "robertson", "atire")


class Stems:
    """Words to their stems through ``stemmer`` (``stemWords``; None keeps words as they are),
    each word stemmed once while at most ``limit`` are kept: a passage batch or a query repeats
    words the ones before it stemmed, and the pure-Python Snowball stemmer was the costliest
    step of both. A callable bm25s's ``tokenize`` takes as its stemmer."""

    def __init__(self, stemmer: Any, limit: int):
        self.stemmer, self.limit = stemmer, limit
        self._stems: dict[str, str] = {}

    def __call__(self, words: list[str]) -> list[str]:
        if self.stemmer is None:
            return words
        if len(self._stems) > self.limit:
            self._stems.clear()  # bounded: rare words come back seldom
        new = [w for w in words if w not in self._stems]
        if new:
            self._stems.update(zip(new, self.stemmer.stemWords(new)))
        return [self._stems[w] for w in words]


@dataclass(frozen=True)
class BuildLimits:
    group_entries: int = 10_000_000  # entries sorted at once when writing columns: ~120 MB
    stem_cache: int = 2_000_000  # words whose stem is remembered: ~250 MB at most


def passage_texts(batch: pa.Table) -> list[str]:
    """Title and text of each passage, indexed together as one document."""
    return [
        f"{title}\n{text}" for title, text in zip(batch.column("title").to_pylist(), batch.column("text").to_pylist())
    ]


class Counter:
    """Pass 1: token counts per batch, spilled to ``work``; document frequencies and lengths."""

    def __init__(self, work: Path, params: Any, stemmer: Any, limits: BuildLimits = BuildLimits()):
        self.work, self.params, self.stemmer, self.limits = work, params, stemmer, limits
        self.vocab: dict[str, int] = {}  # token -> id in order of first sight
        self.stems = Stems(stemmer, limits.stem_cache)  # a word is stemmed once, not per batch
        self.df = np.zeros(0, dtype=np.int64)
        self.n_docs, self.total_len, self.n_batches = 0, 0, 0

    def counting(self, batches: Iterable[pa.Table]) -> Iterator[pa.Table]:
        """Each batch, passed on after its counts are spilled (so one read feeds two writers)."""
        for batch in batches:
            self.count(batch)
            yield batch

    def count(self, batch: pa.Table) -> None:
        # Split and drop stopwords as bm25s.tokenize does, then stem each word as it would.
        tokens = bm25s.tokenize(
            passage_texts(batch), stopwords=self.params.stopwords, stemmer=None, return_ids=True, show_progress=False
        )
        local_to_global = np.empty(len(tokens.vocab), dtype=np.int64)
        for word, stem in zip(tokens.vocab, self.stems(list(tokens.vocab))):
            local_to_global[tokens.vocab[word]] = self.vocab.setdefault(stem, len(self.vocab))
        lengths = np.fromiter(map(len, tokens.ids), dtype=np.int64, count=len(tokens.ids))
        flat = np.fromiter(chain.from_iterable(tokens.ids), dtype=np.int64, count=int(lengths.sum()))
        docs = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        pairs, tf = np.unique((docs << 32) | local_to_global[flat], return_counts=True)
        doc, token = pairs >> 32, pairs & 0xFFFFFFFF
        if len(self.df) < len(self.vocab):
            self.df = np.concatenate([self.df, np.zeros(len(self.vocab) - len(self.df), np.int64)])
        self.df += np.bincount(token, minlength=len(self.df))
        np.savez(
            self.work / f"counts-{self.n_batches:06d}.npz",
            doc=doc.astype(INT_DTYPE),
            token=token.astype(INT_DTYPE),
            tf=tf.astype(INT_DTYPE),
            lengths=lengths,
        )
        self.n_docs += len(lengths)
        self.total_len += int(lengths.sum())
        self.n_batches += 1


def idf_array(df: np.ndarray, n_docs: int, method: str) -> np.ndarray:
    """bm25s's ``_build_idf_array``: its idf function per token (math.log, not numpy's)."""
    idf = _select_idf_scorer(method)
    return np.array([idf(d, N=n_docs) if d else 0.0 for d in df.tolist()], dtype=SCORE_DTYPE)


def token_groups(df_by_rank: np.ndarray, group_entries: int) -> np.ndarray:
    """The group of each token (by rank): consecutive tokens with about ``group_entries``
    (passage, token) entries per group; a token never spans two groups.

    >>> token_groups(np.array([3, 1, 4, 1, 5]), 4).tolist()
    [0, 0, 1, 2, 2]
    """
    before = np.cumsum(df_by_rank) - df_by_rank
    return before // max(1, group_entries)


def score_batches(counter: Counter, rank: np.ndarray, groups: np.ndarray, idf: np.ndarray, params: Any) -> None:
    """Pass 2: each spilled batch scored and its entries appended to their group's files."""
    tfc = _select_tfc_scorer(params.method)
    avg_len = np.float64(counter.total_len) / counter.n_docs  # what bm25s's np.mean gives
    offset = 0
    for b in range(counter.n_batches):
        spill = counter.work / f"counts-{b:06d}.npz"
        with np.load(spill) as counts:
            doc, token, tf, lengths = counts["doc"], counts["token"], counts["tf"], counts["lengths"]
        tfc_values = tfc(tf_array=tf.astype(SCORE_DTYPE), l_d=lengths[doc], l_avg=avg_len, k1=params.k1, b=params.b)
        scores = (idf[token] * tfc_values).astype(SCORE_DTYPE)
        ranks = rank[token].astype(INT_DTYPE)
        group = groups[ranks]
        order = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(int(groups[-1]) + 2))
        for g in np.unique(group):
            part = order[bounds[g] : bounds[g + 1]]
            with open(counter.work / f"group-{g:06d}.bin", "ab") as sink:
                np.rec.fromarrays(
                    [ranks[part], (doc[part] + offset).astype(INT_DTYPE), scores[part]], names="rank,doc,score"
                ).tofile(sink)
        offset += len(lengths)
        spill.unlink()


class NpyAppender:
    """A one-dimensional ``.npy`` file of known length written chunk by chunk (no memory map,
    so the pages written do not count as this process's resident memory)."""

    def __init__(self, path: Path, dtype: Any, length: int):
        self.sink = open(path, "wb")
        header = {
            "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
            "fortran_order": False,
            "shape": (int(length),),
        }
        np.lib.format.write_array_header_2_0(self.sink, header)
        self.dtype = dtype

    def append(self, values: np.ndarray) -> None:
        np.ascontiguousarray(values, dtype=self.dtype).tofile(self.sink)

    def close(self) -> None:
        self.sink.close()


def write_columns(work: Path, folder: Path, df_by_rank: np.ndarray, groups: np.ndarray) -> None:
    """Pass 3: each group's entries sorted by token into the CSC ``data`` and ``indices``."""
    n_entries = int(df_by_rank.sum())
    data = NpyAppender(folder / DATA_FILE, SCORE_DTYPE, n_entries)
    indices = NpyAppender(folder / INDICES_FILE, INT_DTYPE, n_entries)
    kind = np.dtype([("rank", INT_DTYPE), ("doc", INT_DTYPE), ("score", SCORE_DTYPE)])
    for g in range(int(groups[-1]) + 1 if len(groups) else 0):
        path = work / f"group-{g:06d}.bin"
        if not path.exists():
            continue
        entries = np.fromfile(path, dtype=kind)
        order = np.argsort(entries["rank"], kind="stable")
        data.append(entries["score"][order])
        indices.append(entries["doc"][order])
        path.unlink()
    data.close()
    indices.close()
    indptr = np.zeros(len(df_by_rank) + 1, dtype=np.int64)
    np.cumsum(df_by_rank, out=indptr[1:])
    np.save(folder / INDPTR_FILE, indptr)


def build_bm25_files(
    batches: Iterable[pa.Table], folder: Path, params: Any, stemmer: Any, limits: BuildLimits = BuildLimits()
) -> Iterator[pa.Table]:
    """Yield ``batches`` back (for the passages writer) while counting them, then write the
    index files into ``folder``. A generator, so one read of the corpus feeds both."""
    if params.method not in SPARSE_METHODS:
        raise ValueError(f"BM25 method {params.method!r} is not sparse; use one of {SPARSE_METHODS}")
    work = folder / "_work"
    work.mkdir()
    counter = Counter(work, params, stemmer, limits)
    yield from counter.counting(batches)
    if counter.n_docs == 0:
        raise ValueError("passages: no rows to index")
    tokens = list(counter.vocab)
    del counter.vocab  # the sorted list below replaces it
    order = np.array(sorted(range(len(tokens)), key=tokens.__getitem__), dtype=np.int64)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    df_by_rank = counter.df[order]
    groups = token_groups(df_by_rank, limits.group_entries)
    score_batches(counter, rank, groups, idf_array(counter.df, counter.n_docs, params.method), params)
    write_columns(work, folder, df_by_rank, groups)
    vocab = pa.table({"token": pa.array([tokens[i] for i in order.tolist()], pa.large_string())})
    with pa.OSFile(str(folder / VOCAB_FILE), "wb") as sink, pa.ipc.new_file(sink, vocab.schema) as out:
        out.write_table(vocab)
    stats = {
        "n_docs": counter.n_docs,
        "n_tokens": len(tokens),
        "n_entries": int(df_by_rank.sum()),
        "avg_len": counter.total_len / counter.n_docs,
    }
    (folder / STATS_FILE).write_text(json.dumps(stats), encoding="utf-8")
    shutil.rmtree(work)
