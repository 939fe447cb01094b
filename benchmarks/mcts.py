"""ReasonRAG MCTS with the embedded model: cost and pairs per question, and batching (§2.2).

``--questions`` bundled HotpotQA questions (default 16) are searched by MCTS with the embedded
SmolLM2-135M on CPU, held to the Reasoning / Grounding grammars, BM25 over the bundled
paragraphs, the demo's small search (6 iterations, max_depth 4, a query first, cover-EM), once
with one selection per round (sequential MCTS) and once with ``parallel_selections`` 4.

Per setting: engine calls, requests and generated tokens per question, the mean engine batch
(requests per call: the questions of the shard are in flight together), the step preference
pairs per question beside the paper's 2.9 (13,289 pairs from 4,603 questions, with 64
iterations on an 8B policy), malformed steps, and wall time. ``batch_ratio`` is the mean batch
of the row over the sequential one. Engine calls go straight to the backend (no cache).

Run: COLUMNS=250 .venv/bin/python benchmarks/mcts.py [--questions 16]
Writes benchmarks/results/mcts.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import CountingBackend, embedded_search, report  # noqa: E402
from ragfactory.tasks.llm.batcher import Batcher  # noqa: E402
from ragfactory.tasks.search.mcts.config import MctsConfig  # noqa: E402
from ragfactory.tasks.search.mcts.exports import mcts_preference_pairs  # noqa: E402
from ragfactory.tasks.search.shard import expand_shard  # noqa: E402

PAPER_PAIRS_PER_QUESTION = 13289 / 4603
CONFIG = MctsConfig(iterations=6, max_depth=4, min_queries=1, max_tokens=72, temperature=0.7, metric="cover_em")


def measure(backend, questions, retriever, parallel: int) -> dict:
    counting = CountingBackend(backend)
    config = replace(CONFIG, parallel_selections=parallel)
    start = time.perf_counter()
    rows = asyncio.run(
        expand_shard("mcts", questions, Batcher(counting), retriever, config, "bench-mcts", 0, len(questions))
    )
    wall = time.perf_counter() - start
    n = len(questions)
    pairs = mcts_preference_pairs(rows.nodes, questions)
    steps = [r for r in rows.nodes if r["kind"] != "question"]
    return {
        "parallel_selections": parallel,
        "questions": n,
        "steps": len(steps),
        "malformed_steps": sum(r["is_format_error"] for r in steps),
        "calls_per_question": round(len(counting.calls) / n, 2),
        "requests_per_question": round(counting.requests / n, 2),
        "tokens_per_question": round(counting.tokens / n, 1),
        "mean_batch": round(counting.requests / len(counting.calls), 2),
        "pairs_per_question": round(len(pairs) / n, 2),
        "paper_pairs_per_question": round(PAPER_PAIRS_PER_QUESTION, 2),
        "questions_with_pairs": len({p["question_id"] for p in pairs}),
        "wall_s": round(wall, 1),
        "tokens_per_s": round(counting.tokens / wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=16)
    args = parser.parse_args()
    questions, retriever, backend = embedded_search("hotpotqa", args.questions)
    rows = [measure(backend, questions, retriever, parallel) for parallel in (1, 4)]
    for row in rows:
        row["batch_ratio"] = round(row["mean_batch"] / rows[0]["mean_batch"], 2)
    report("mcts", rows)


if __name__ == "__main__":
    main()
