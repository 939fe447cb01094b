"""BM25 retrieval with bm25s over the passages table (title and text indexed together).

BM25 is the sparse retriever R3-RAG evaluates against E5 (R3-RAG, §5.4 and
Table 3: its agent transfers to BM25), and the cheap default for building trees on CPU.
The index is bm25s's sparse matrix of precomputed scores, built batch by batch
(``bm25_build.py``) and memory-mapped when loaded, so every process on a machine shares one copy
through the page cache; a query costs one tokenisation pass and one column lookup per word. Tokens are lower-cased words with
bm25s's bundled English stopwords removed and the Snowball English stemmer applied (PyStemmer
when installed, else the pure-Python snowballstemmer implementing the same algorithm); nothing
is downloaded.
"""

from __future__ import annotations

import bisect
import importlib
import importlib.util
import json
import shutil
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import pyarrow as pa
from bm25s.selection import topk

from ragfactory.tasks.retrieval.bm25_build import (
    DATA_FILE,
    INDICES_FILE,
    INDPTR_FILE,
    INT_DTYPE,
    SCORE_DTYPE,
    VOCAB_FILE,
    BuildLimits,
    Stems,
    build_bm25_files,
)
from ragfactory.tasks.retrieval.index_store import (
    PassageSource,
    as_source,
    content_key,
    hits_from_rows,
    index_folder,
    load_or_write,
    read_passages,
    write_passages,
)
from ragfactory.tasks.retrieval.types import Hit, check_k

PARAMS_FILE = "bm25_params.json"
QUERY_STEMS = 200_000  # query words whose stem a loaded index remembers: ~25 MB at most


@dataclass(frozen=True)
class BM25Params:
    k1: float = 1.5  # bm25s default term-frequency saturation (tasks/retrieval/config.py BM25Config)
    b: float = 0.75  # bm25s default document-length normalisation
    method: str = "lucene"  # bm25s default variant: Lucene's BM25, as Pyserini in Search-R1
    stopwords: str = "en"  # bm25s bundles the NLTK English list, so no download is needed
    stemmer: str | None = "english"  # Snowball language, or None to match surface forms only

    @classmethod
    def from_config(cls, config: Any = None) -> BM25Params:
        """Parameters from a ``BM25Config`` (anything with ``k1``, ``b``), themselves, or None."""
        if config is None or isinstance(config, cls):
            return config or cls()
        return cls(k1=float(config.k1), b=float(config.b))


def load_stemmer(language: str | None) -> tuple[Any, str]:
    """A stemmer with ``stemWords`` and the name of its implementation (part of the index key)."""
    if language is None:
        return None, "none"
    for module in ("Stemmer", "snowballstemmer"):
        if importlib.util.find_spec(module) is not None:
            lib = importlib.import_module(module)
            make = lib.Stemmer if module == "Stemmer" else lib.stemmer
            return make(language), f"{module}:{language}"
    raise RuntimeError(f"stemming in {language!r} needs PyStemmer or snowballstemmer installed")


class Vocabulary:
    """The index's tokens in sorted order, memory-mapped; a token's id is its position."""

    def __init__(self, tokens: pa.Array):
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> str:
        return self.tokens[i].as_py()

    def get(self, token: str) -> int | None:
        i = bisect.bisect_left(self, token)
        return i if i < len(self) and self[i] == token else None


class BM25Retriever:
    """A BM25 index on disk (memory-mapped score arrays and vocabulary) plus its passages;
    ``search`` scores a batch of queries."""

    def __init__(self, folder: Path, params: BM25Params, mmap: bool = True):
        mode = "r" if mmap else None
        self.data, self.indices, self.indptr = (
            np.load(folder / "bm25" / name, mmap_mode=mode) for name in (DATA_FILE, INDICES_FILE, INDPTR_FILE)
        )
        vocab_file = pa.memory_map(str(folder / "bm25" / VOCAB_FILE))
        self.vocab = Vocabulary(pa.ipc.open_file(vocab_file).read_all().column("token").combine_chunks())
        self.passages = read_passages(folder)
        self.params = params
        self.stemmer, self.stemmer_name = load_stemmer(params.stemmer)
        self._stems = Stems(self.stemmer, QUERY_STEMS)  # a build's queries repeat their words
        # a stemmer keeps the word it works on in itself: concurrent shards' searches take turns
        self._stemming = threading.Lock()
        self.is_loaded = False
        self.index_dir: Path | None = None

    @classmethod
    def build(
        cls, passages: pa.Table | PassageSource, params: BM25Params = BM25Params(), limits: BuildLimits = BuildLimits()
    ) -> BM25Retriever:
        """An index over ``passages`` in a scratch folder, removed once mapped (Linux keeps a
        mapped file readable after its name is gone)."""
        scratch = Path(tempfile.mkdtemp(prefix="bm25-"))
        try:
            write_index(as_source(passages), scratch, params, limits)
            return cls.load(scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    @classmethod
    def load(cls, folder: str | Path) -> BM25Retriever:
        folder = Path(folder)
        params = BM25Params(**json.loads((folder / PARAMS_FILE).read_text(encoding="utf-8")))
        return cls(folder, params)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Up to ``k`` hits per query; passages sharing no word with the query are left out.

        Scores are summed and ranked by bm25s's own functions, so ties break as bm25s breaks them.
        """
        k = min(check_k(k), self.passages.num_rows)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        scores = np.zeros((len(queries), k), dtype=np.float64)
        for q, ids in enumerate(self._query_token_ids(queries)):
            if ids:
                summed = bm25s.BM25._compute_relevance_from_scores(
                    self.data,
                    self.indptr,
                    self.indices,
                    self.passages.num_rows,
                    np.asarray(ids, dtype=INT_DTYPE),
                    np.dtype(SCORE_DTYPE),
                )
                scores[q], rows[q] = top_k(summed, k)
        # Lucene BM25 gives every matching passage a positive score, so 0 means no shared word.
        rows[scores <= 0] = -1
        return hits_from_rows(self.passages, rows, scores)

    def _query_token_ids(self, queries: list[str]) -> list[list[int]]:
        if not queries:
            return []
        with self._stemming:  # a stemmer keeps the word it works on in itself
            tokens = bm25s.tokenize(
                list(queries),
                stopwords=self.params.stopwords,
                stemmer=self._stems if self.stemmer is not None else None,
                return_ids=False,
                show_progress=False,
            )
        found = [[self.vocab.get(t) if t else None for t in words] for words in tokens]
        return [[i for i in ids if i is not None] for ids in found]

    def memory(self) -> dict:
        """Bytes this index maps from disk (shared between processes) by part."""
        return {
            "scores": self.data.nbytes + self.indices.nbytes + self.indptr.nbytes,
            "vocabulary": self.vocab.tokens.nbytes,
            "passages": self.passages.nbytes,
        }


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` (scores, rows) of one query, best first, as ``bm25s.selection.topk`` gives
    them; rows scoring 0 come back as -1.

    bm25s partitions the whole score array, which numpy does slowly when most scores are 0
    (1.4 s a query at 1 M passages). Only the passages sharing a word can rank, so they are
    selected alone; their order is the same as long as no two of the best k, nor the k-th
    and a runner-up, score the same. Where they do, which tied passage bm25s returns depends
    on its selection's internals, so it is asked itself.
    """
    found = np.flatnonzero(scores)
    values = scores[found]
    best = np.argpartition(values, -k)[-k:] if len(found) > k else np.arange(len(found))
    top = values[best]
    ties = len(np.unique(top)) < len(top) or (len(found) > k and np.count_nonzero(values >= top.min()) > k)
    if ties:
        return topk(scores, k=k, sorted=True, backend="numpy")
    order = np.argsort(-top)
    rows, out = np.full(k, -1, dtype=np.int64), np.zeros(k, dtype=scores.dtype)
    rows[: len(order)], out[: len(order)] = found[best][order], top[order]
    return out, rows


def write_index(source: PassageSource, folder: Path, params: BM25Params, limits: BuildLimits = BuildLimits()) -> dict:
    """The passages, BM25 arrays and parameters written into ``folder`` from one read of
    ``source``; returns the manifest fields known once written."""
    stemmer, _ = load_stemmer(params.stemmer)
    (folder / "bm25").mkdir()
    rows = write_passages(build_bm25_files(source.batches(), folder / "bm25", params, stemmer, limits), folder)
    (folder / PARAMS_FILE).write_text(json.dumps(asdict(params)), encoding="utf-8")
    return {"n_passages": rows}


def bm25_settings(params: BM25Params) -> dict:
    """What shapes a BM25 index: its parameters, the stemmer implementation, the bm25s version."""
    _, stemmer_name = load_stemmer(params.stemmer)
    return {"kind": "bm25", **asdict(params), "stemmer_impl": stemmer_name, "bm25s": bm25s.__version__}


def load_or_build_bm25(
    passages: pa.Table | PassageSource,
    root: str | Path,
    config: Any = None,
    limits: BuildLimits = BuildLimits(),
) -> BM25Retriever:
    """A BM25 retriever, loaded from ``root`` when an index of the same content exists there.

    ``passages`` is a table or a ``PassageSource`` (the warehouse's corpus, read in batches);
    ``config`` is a ``BM25Params``, a ``BM25Config`` or None (defaults). The result's
    ``is_loaded`` says whether it was loaded, ``index_dir`` where it lives.
    """
    params = BM25Params.from_config(config)
    source = as_source(passages)
    settings = bm25_settings(params)
    folder = index_folder(root, "bm25", content_key(source, settings))
    retriever, loaded = load_or_write(
        folder,
        write=lambda tmp: write_index(source, tmp, params, limits),
        load=BM25Retriever.load,
        manifest=settings,
    )
    retriever.is_loaded, retriever.index_dir = loaded, folder
    return retriever
