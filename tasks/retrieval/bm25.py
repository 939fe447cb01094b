"""BM25 retrieval with bm25s over the passages table (title and text indexed together).

BM25 is the sparse retriever R3-RAG evaluates against E5 (R3-RAG, §5.4 and
Table 3: its agent transfers to BM25), and the cheap default for building trees on CPU.
Queries are scored in batches: bm25s keeps the whole index as one sparse matrix, so a batch
costs one tokenisation pass and one sparse lookup per query. Tokens are lower-cased words with
bm25s's bundled English stopwords removed and the Snowball English stemmer applied (PyStemmer
when installed, else the pure-Python snowballstemmer implementing the same algorithm); nothing
is downloaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import pyarrow as pa

from ragfactory.tasks.retrieval.index_store import (
    content_key,
    hits_from_rows,
    index_folder,
    load_or_build,
    read_passages,
    select_passages,
    write_passages,
)
from ragfactory.tasks.retrieval.types import Hit, check_k

PARAMS_FILE = "bm25_params.json"


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


class BM25Retriever:
    """A bm25s index plus the passages it was built over; ``search`` scores a batch of queries."""

    def __init__(self, index: bm25s.BM25, passages: pa.Table, params: BM25Params):
        self.index = index
        self.passages = passages
        self.params = params
        self.stemmer, self.stemmer_name = load_stemmer(params.stemmer)
        self.is_loaded = False
        self.index_dir: Path | None = None

    @classmethod
    def build(cls, passages: pa.Table, params: BM25Params = BM25Params()) -> BM25Retriever:
        passages = select_passages(passages)
        stemmer, _ = load_stemmer(params.stemmer)
        docs = [f"{title}\n{text}" for title, text in zip(
            passages.column("title").to_pylist(), passages.column("text").to_pylist()
        )]
        tokens = bm25s.tokenize(
            docs, stopwords=params.stopwords, stemmer=stemmer, return_ids=True, show_progress=False
        )
        index = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
        index.index(tokens, show_progress=False)
        return cls(index, passages, params)

    def save(self, folder: Path) -> None:
        self.index.save(str(folder / "bm25"), show_progress=False)
        write_passages(self.passages, folder)
        (folder / PARAMS_FILE).write_text(json.dumps(asdict(self.params)), encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> BM25Retriever:
        folder = Path(folder)
        params = BM25Params(**json.loads((folder / PARAMS_FILE).read_text(encoding="utf-8")))
        index = bm25s.BM25.load(str(folder / "bm25"), load_corpus=False, show_progress=False)
        return cls(index, read_passages(folder), params)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Up to ``k`` hits per query; passages sharing no word with the query are left out."""
        k = min(check_k(k), self.passages.num_rows)
        token_ids = self._query_token_ids(queries)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        scores = np.zeros((len(queries), k), dtype=np.float64)
        live = [q for q, ids in enumerate(token_ids) if ids]
        if live:
            found = self.index.retrieve(
                [token_ids[q] for q in live], k=k, show_progress=False, n_threads=0
            )
            rows[live], scores[live] = found.documents, found.scores
        # Lucene BM25 gives every matching passage a positive score, so 0 means no shared word.
        rows[scores <= 0] = -1
        return hits_from_rows(self.passages, rows, scores)

    def _query_token_ids(self, queries: list[str]) -> list[list[int]]:
        if not queries:
            return []
        tokens = bm25s.tokenize(
            list(queries), stopwords=self.params.stopwords, stemmer=self.stemmer,
            return_ids=False, show_progress=False,
        )
        vocab = self.index.vocab_dict
        return [[vocab[t] for t in words if t and t in vocab] for words in tokens]


def bm25_settings(params: BM25Params) -> dict:
    """What shapes a BM25 index: its parameters, the stemmer implementation, the bm25s version."""
    _, stemmer_name = load_stemmer(params.stemmer)
    return {"kind": "bm25", **asdict(params), "stemmer_impl": stemmer_name,
            "bm25s": bm25s.__version__}


def load_or_build_bm25(
    passages: pa.Table, root: str | Path, config: Any = None
) -> BM25Retriever:
    """A BM25 retriever, loaded from ``root`` when an index of the same content exists there.

    ``config`` is a ``BM25Params``, a ``BM25Config`` or None (defaults). The result's
    ``is_loaded`` says whether it was loaded, ``index_dir`` where it lives.
    """
    params = BM25Params.from_config(config)
    passages = select_passages(passages)
    settings = bm25_settings(params)
    folder = index_folder(root, "bm25", content_key(passages, settings))
    retriever, loaded = load_or_build(
        folder,
        build=lambda: BM25Retriever.build(passages, params),
        save=lambda r, path: r.save(path),
        load=BM25Retriever.load,
        manifest={**settings, "n_passages": passages.num_rows},
    )
    retriever.is_loaded, retriever.index_dir = loaded, folder
    return retriever
