"""Corpus benchmark: ingest and BM25 over synthetic Wikipedia-like corpora of growing size.

For each size (default 1 M and 4 M passages) it writes a FlashRAG ``{"id","contents"}`` JSONL
corpus of ~100-word passages (words drawn Zipf-like from a 60,000-word vocabulary, titles of
two words), then runs each stage in a subprocess of its own under ``/usr/bin/time -v`` and
reads its peak resident memory ("Maximum resident set size"):

- ingest: the corpus file into the warehouse's ``passages`` shards (``write_corpus_shards``,
  the ingest task's own loop);
- index: the BM25 index over the warehouse's corpus (``open_retriever``, as the build's index
  stage opens it), read in batches and saved memory-mapped;
- query: opens the saved index, answers ``--queries`` queries at k = 3 (one call of them all,
  then one call per query as a search tree asks) and, while it holds the index open, starts a
  second process that opens the same index and answers the same queries: the second process's
  memory beyond a bare interpreter with the same imports is the cost of one more worker.

Goals (ratios within one run): ingest peak at the largest size / smallest <= 1.2; index peak
<= 1.5 GB per million passages; a second process <= 200 MB. Results go to
benchmarks/results/corpus.json. The machine may be shared: compare ratios, not seconds.
Run: .venv/bin/python benchmarks/corpus.py [--sizes 250000,1000000] [--queries 1000]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import report  # noqa: E402

VOCAB_WORDS = 60_000  # distinct words, Zipf-weighted like running English text
WORDS_PER_PASSAGE = 100  # wiki-18 passages are 100-word chunks
SOURCE = "wiki"


def generate(path: Path, n: int, seed: int = 18, chunk: int = 100_000) -> None:
    """``n`` FlashRAG-format passages written ``chunk`` at a time (memory stays one chunk)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "an", "el", "or"]
    words = pa.array(["".join(syllables[(i // 12**j) % 12] for j in range(5)) for i in range(VOCAB_WORDS)])
    weights = 1.0 / np.arange(1, VOCAB_WORDS + 1) ** 1.07
    weights /= weights.sum()
    with open(path, "w", encoding="utf-8") as sink:
        for start in range(0, n, chunk):
            rows = min(chunk, n - start)
            lengths = rng.integers(WORDS_PER_PASSAGE - 20, WORDS_PER_PASSAGE + 21, rows)
            offsets = pa.array(np.r_[0, np.cumsum(lengths)].astype(np.int32))
            drawn = words.take(pa.array(rng.choice(VOCAB_WORDS, size=int(lengths.sum()), p=weights)))
            texts = pc.binary_join(pa.ListArray.from_arrays(offsets, drawn), " ")
            titles = pc.binary_join_element_wise(
                words.take(pa.array(rng.integers(0, VOCAB_WORDS, rows))),
                words.take(pa.array(rng.integers(0, VOCAB_WORDS, rows))),
                " ",
            )
            ids = np.arange(start, start + rows).astype(str)
            for pid, title, text in zip(ids.tolist(), titles.to_pylist(), texts.to_pylist()):
                sink.write(json.dumps({"id": pid, "contents": f'"{title}"\n{text}'}) + "\n")


def queries(n: int, seed: int = 5) -> list[str]:
    """``n`` 4-word queries over the mid-frequency words (what a sub-question looks like)."""
    import numpy as np

    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "an", "el", "or"]
    rng = np.random.default_rng(seed)
    picks = rng.integers(50, 20_000, size=(n, 4))
    return [" ".join("".join(syllables[(int(i) // 12**j) % 12] for j in range(5)) for i in row) for row in picks]


def memory_now() -> dict:
    """This process's private (RssAnon) and file-backed (RssFile, shared) resident kB, and PSS."""
    status = {
        line.split(":")[0]: int(line.split()[1])
        for line in open("/proc/self/status")
        if line.startswith(("RssAnon", "RssFile", "VmRSS"))
    }
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("Pss:"):
            status["Pss"] = int(line.split()[1])
    return status


def stage_ingest(root: str, corpus: str) -> dict:
    from ragfactory.tasks.ingest import write_corpus_shards
    from ragfactory.warehouse.store import Warehouse

    n_passages, n_rejects = write_corpus_shards(Warehouse(root), Path(corpus), SOURCE)
    return {"passages": n_passages, "rejects": n_rejects}


def open_index(root: str):
    from ragfactory.tasks.retrieval.config import RetrievalConfig
    from ragfactory.tasks.retrieval.corpus import open_retriever
    from ragfactory.warehouse.store import Warehouse

    return open_retriever(Warehouse(root), [SOURCE], RetrievalConfig(), "bm25")


def stage_index(root: str) -> dict:
    retriever = open_index(root)
    from ragfactory.tasks.retrieval.report import index_report

    return {"built": not retriever.is_loaded, **index_report(retriever.index_dir)}


def stage_query(root: str, n_queries: int) -> dict:
    asked = queries(n_queries)
    start = time.perf_counter()
    retriever = open_index(root)
    opened = time.perf_counter() - start
    start = time.perf_counter()
    retriever.search(asked, k=3)
    batch_s = time.perf_counter() - start
    single = asked[: max(1, n_queries // 5)]
    start = time.perf_counter()
    for text in single:
        retriever.search([text], k=3)
    single_s = time.perf_counter() - start
    second = json.loads(
        subprocess.run(
            [sys.executable, __file__, "stage", "second", root, str(n_queries)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.splitlines()[-1]
    )
    return {
        "open_s": round(opened, 2),
        "queries_per_s": round(n_queries / batch_s, 1),
        "single_queries_per_s": round(len(single) / single_s, 1),
        "second": second,
    }


def stage_second(root: str, n_queries: int) -> dict:
    """Memory of a second process: after the imports, then after opening the index and querying."""
    from ragfactory.tasks.retrieval import bm25, corpus  # noqa: F401  (the imports a worker has)

    bare = memory_now()
    retriever = open_index(root)
    retriever.search(queries(n_queries), k=3)
    used = memory_now()
    return {key: round((used[key] - bare[key]) / 1024, 1) for key in used}


STAGES = {"ingest": stage_ingest, "index": stage_index, "query": stage_query, "second": stage_second}


def run_stage(name: str, *args: str) -> dict:
    """A stage in a subprocess under /usr/bin/time -v: its result, wall seconds, peak RSS (MB)."""
    command = ["/usr/bin/time", "-v", sys.executable, __file__, "stage", name, *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"stage {name} failed:\n{done.stderr[-3000:]}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):(\d+\.?\d*)", done.stderr)
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    return {
        "result": json.loads(done.stdout.splitlines()[-1]),
        "wall_s": round(seconds, 1),
        "peak_mb": round(peak_kb / 1024, 1),
    }


def measure(size: int, work: Path, n_queries: int) -> dict:
    corpus, root = work / f"corpus-{size}.jsonl", work / f"wh-{size}"
    if not corpus.exists():
        generate(corpus, size)
    shutil.rmtree(root, ignore_errors=True)
    ingest = run_stage("ingest", str(root), str(corpus))
    index = run_stage("index", str(root))
    query = run_stage("query", str(root), str(n_queries))
    second = query["result"]["second"]
    return {
        "passages": size,
        "corpus_mb": round(corpus.stat().st_size / 2**20),
        "ingest_s": ingest["wall_s"],
        "ingest_peak_mb": ingest["peak_mb"],
        "index_s": index["wall_s"],
        "index_peak_mb": index["peak_mb"],
        "index_peak_mb_per_m": round(index["peak_mb"] / (size / 1e6), 1),
        "index_disk_mb": round(index["result"]["disk_bytes"] / 2**20),
        "query_peak_mb": query["peak_mb"],
        "open_s": query["result"]["open_s"],
        "queries_per_s": query["result"]["queries_per_s"],
        "single_queries_per_s": query["result"]["single_queries_per_s"],
        "second_private_mb": second["RssAnon"],
        "second_shared_mb": second["RssFile"],
        "second_pss_mb": second["Pss"],
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "stage":
        name, args = argv[1], argv[2:]
        typed = [int(a) if a.isdigit() else a for a in args]
        print(json.dumps(STAGES[name](*typed)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,4000000", help="Comma-separated corpus sizes")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/ragfactory-corpus-bench"),
        help="Where corpora and warehouses go (several GB per million passages)",
    )
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for size in sizes:
        rows.append(measure(size, args.work, args.queries))
        print(json.dumps(rows[-1]), flush=True)  # a long run shows each size as it is measured
    if len(rows) > 1:
        rows.append(
            {
                "passages": f"ratio {sizes[-1]}/{sizes[0]}",
                "ingest_peak_mb": round(rows[-1]["ingest_peak_mb"] / rows[0]["ingest_peak_mb"], 2),
                "index_peak_mb": round(rows[-1]["index_peak_mb"] / rows[0]["index_peak_mb"], 2),
            }
        )
    report("corpus", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
