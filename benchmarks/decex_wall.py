"""DecEx-RAG wall time per question on the embedded CPU model, with the demo's parameters.

Expands the first N HotpotQA questions of the bundled sample with the DecEx settings and engine
of ``configs/demo.yaml`` (BM25 over the questions' own paragraphs), through the batcher, and
reports seconds per question, generated tokens per second, the mean engine batch size and the
share of format-error nodes (a 135M model often breaks the tagged format).

Run: .venv/bin/python benchmarks/decex_wall.py [--questions 4] [--config configs/demo.yaml]
Writes benchmarks/results/decex_wall.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

from ragfactory.flows.config import load_build_config  # noqa: E402
from ragfactory.tasks.data.loaders import load_bundled  # noqa: E402
from ragfactory.tasks.llm.cache import CallCache  # noqa: E402
from ragfactory.tasks.llm.engine import make_batcher  # noqa: E402
from ragfactory.tasks.retrieval.bm25 import BM25Retriever  # noqa: E402
from ragfactory.tasks.search.decex.expansion import expand_question  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--config", default=str(REPO / "configs" / "demo.yaml"))
    args = parser.parse_args()
    config = load_build_config(args.config)
    data = load_bundled("hotpotqa", limit=args.questions)
    retriever = BM25Retriever.build(pa.Table.from_pylist(data.passages))
    with tempfile.TemporaryDirectory() as tmp:
        batcher = make_batcher(config.llm, CallCache("bench"), Path(tmp) / "models")
        batcher.backend_for("policy").backend.load()  # model load is not part of the wall time
        jobs = [
            partial(expand_question, q, batcher, retriever, config.search.decex, "bench", 0) for q in data.questions
        ]
        start = time.perf_counter()
        trees = asyncio.run(batcher.run_all(jobs, config.llm.max_in_flight))
        wall = time.perf_counter() - start
    nodes = [row for tree in trees for row in tree.node_rows()]
    tokens = sum(row["completion_tokens"] for row in batcher.cache.rows())
    stats = batcher.stats
    report(
        "decex_wall",
        [
            {
                "questions": len(trees),
                "wall_s": round(wall, 1),
                "s_per_question": round(wall / len(trees), 1),
                "generated_tokens": tokens,
                "tokens_per_s": round(tokens / wall, 1),
                "engine_calls": stats.engine_calls,
                "mean_batch_size": round(stats.mean_batch_size, 1),
                "nodes": len(nodes),
                "format_error_share": round(sum(r["is_format_error"] for r in nodes) / len(nodes), 2),
            }
        ],
    )


if __name__ == "__main__":
    main()
