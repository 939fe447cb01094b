"""Retrieval benchmark: BM25 and dense over the bundled corpus, 1,000 dataset questions as queries.

The corpus is the context paragraphs of the bundled HotpotQA, 2WikiMultiHopQA and MuSiQue dev
samples, deduplicated (as the build flow's ingest stage makes it); the queries are their
questions, first 1,000. For each retriever it measures the first build (which saves the index),
loading the saved index, and queries per second with the whole batch in one call and with one
query per call (how a search tree asks). For dense it also builds an IVF index over the same
vectors and reports its recall@10 against the exact index. Results go to
benchmarks/results/retrieval.json.
Run: .venv/bin/python benchmarks/retrieval.py [--queries N] [--k K] [--passages N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS  # noqa: E402

from ragfactory.tasks.data.loaders import dedupe_passages, load_bundled  # noqa: E402
from ragfactory.tasks.retrieval.bm25 import load_or_build_bm25  # noqa: E402
from ragfactory.tasks.retrieval.dense import (  # noqa: E402
    DenseParams,
    build_index,
    load_embedder,
    load_or_build_dense,
)

DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")


def bundled_corpus() -> tuple[pa.Table, list[str]]:
    """The deduplicated passages and the questions of the bundled multi-hop samples."""
    passages, questions = [], []
    for name in DATASETS:
        loaded = load_bundled(name)
        passages.extend(loaded.passages)
        questions.extend(q["question"] for q in loaded.questions)
    rows = dedupe_passages(passages)
    table = pa.table({c: [r[c] for r in rows] for c in ("passage_id", "title", "text")})
    return table, questions


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def measure(name: str, open_index, queries: list[str], k: int, n_single: int):
    """Build (and save), reload, then time one batched call and one call per query."""
    built, build_s = timed(open_index)
    loaded, load_s = timed(open_index)
    assert not built.is_loaded and loaded.is_loaded, "the second open should load the saved index"
    _, batch_s = timed(lambda: loaded.search(queries, k))
    single = queries[:n_single]
    _, single_s = timed(lambda: [loaded.search([q], k) for q in single])
    row = {
        "retriever": name,
        "passages": loaded.passages.num_rows,
        "build_s": round(build_s, 2),
        "load_s": round(load_s, 3),
        "qps_batch": round(len(queries) / batch_s, 1),
        "qps_single": round(len(single) / single_s, 1),
    }
    return row, loaded


def compare_ivf(dense, queries: list[str], k: int = 10) -> list[dict]:
    """An IVF index over the flat index's vectors: recall@k against flat and faiss search speed,
    for several nprobe values; the default (DenseParams.probe_fraction of the lists) is marked."""
    vectors = dense.index.reconstruct_n(0, dense.index.ntotal)
    ivf, build_s = timed(lambda: build_index(vectors, DenseParams(ivf_threshold=0)))
    lists = faiss.extract_index_ivf(ivf)
    default = lists.nprobe
    probes = sorted({8, 16, 32, 64, default})
    query_vectors = dense.embedder.embed_queries(queries)
    (_, exact), flat_s = timed(lambda: dense.index.search(query_vectors, k))
    rows = []
    for nprobe in probes:
        if rows and min(nprobe, lists.nlist) == rows[-1]["nprobe"]:
            continue
        lists.nprobe = min(nprobe, lists.nlist)
        (_, approx), ivf_s = timed(lambda: ivf.search(query_vectors, k))
        recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(exact, approx)])
        rows.append(
            {
                "nlist": lists.nlist,
                "nprobe": lists.nprobe,
                "is_default": lists.nprobe == default,
                "build_s": round(build_s, 2),
                f"recall@{k}": round(float(recall), 4),
                "qps_flat": round(len(queries) / flat_s, 1),
                "qps_ivf": round(len(queries) / ivf_s, 1),
            }
        )
    return rows


def print_table(title: str, rows: list[dict]) -> None:
    table = Table(title=title)
    for column in rows[0]:
        table.add_column(column, justify="left" if column == "retriever" else "right")
    for row in rows:
        table.add_row(*(str(value) for value in row.values()))
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=3, help="hits per query (DecEx-RAG uses 3)")
    parser.add_argument("--single", type=int, default=200, help="queries timed one per call")
    parser.add_argument("--passages", type=int, default=None, help="keep the first N passages")
    args = parser.parse_args()
    passages, questions = bundled_corpus()
    passages = passages.slice(0, args.passages) if args.passages else passages
    queries = questions[: args.queries]
    with tempfile.TemporaryDirectory() as root:
        bm25_row, _ = measure("bm25", lambda: load_or_build_bm25(passages, root), queries, args.k, args.single)
        embedder, model_s = timed(lambda: load_embedder(batch_size=64))
        dense_row, dense = measure(
            "dense",
            lambda: load_or_build_dense(passages, root, DenseParams(), embedder=embedder),
            queries,
            args.k,
            args.single,
        )
        ivf = compare_ivf(dense, queries)
    settings = {
        "queries": len(queries),
        "k": args.k,
        "single_queries": min(args.single, len(queries)),
        "dense_model": embedder.name,
        "dense_device": str(embedder.model.device),
        "model_load_s": round(model_s, 2),
        "cpu_count": os.cpu_count(),
    }
    print_table(f"retrieval: {len(queries)} queries, k={args.k}", [bm25_row, dense_row])
    print_table("dense IVF vs flat over the same vectors (faiss search only)", ivf)
    RESULTS.mkdir(exist_ok=True)
    results = {"settings": settings, "retrievers": [bm25_row, dense_row], "ivf": ivf}
    (RESULTS / "retrieval.json").write_text(json.dumps(results, indent=2))
    print(f"model load {model_s:.1f} s; results in {RESULTS / 'retrieval.json'}")


if __name__ == "__main__":
    main()
