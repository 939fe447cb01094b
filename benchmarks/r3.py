"""R3-RAG cold start with the embedded model: kept trajectories, attempts, judge calls (§3.2).

``--questions`` bundled HotpotQA questions (default 16) get R3-RAG attempts from the embedded
SmolLM2-135M on CPU as policy and judge, held to the step and verdict grammars, BM25 over the
bundled paragraphs, the demo's small settings (3 attempts of a query and an answer, top-2
documents of 256 characters, cover-EM before the outcome judge).

Reported: the share of questions with a kept (correct) trajectory beside the paper's 79 %
(51,254 of 64,937 questions, with a strong LLM writing the trajectories); attempts generated per
kept trajectory, and the attempts rejection sampling would have needed (the first correct one's
index + 1, mean over questions kept); steps per kept trajectory; outcomes of all attempts; judge
requests per question and how many of them share an engine call (mean judge requests per call
that holds any, and the share of judge requests that ride in a call with policy steps).
Engine calls go straight to the backend (no cache).

Run: COLUMNS=250 .venv/bin/python benchmarks/r3.py [--questions 16]
Writes benchmarks/results/r3.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import CountingBackend, embedded_search, report  # noqa: E402
from ragfactory.tasks.llm.batcher import Batcher  # noqa: E402
from ragfactory.tasks.search.r3.config import R3Config  # noqa: E402
from ragfactory.tasks.search.shard import expand_shard  # noqa: E402

PAPER_KEPT_SHARE = 51254 / 64937
CONFIG = R3Config(
    n_attempts=3,
    max_iterations=2,
    min_queries=1,
    answer_at_limit=True,
    top_k=2,
    doc_chars=256,
    max_tokens=96,
    metric="cover_em",
)


def summarise(nodes: list[dict], questions: int) -> dict:
    """Kept share, attempts and steps from the attempts' nodes."""
    steps = [dict(n, parsed=json.loads(n["parsed"])) for n in nodes if n["kind"] != "question"]
    first = {(n["question_id"], n["parsed"]["attempt"]): n["parsed"] for n in steps if n["depth"] == 1}
    kept = {q for (q, _), p in first.items() if p["kept"]}
    first_correct = {}
    for (question, attempt), parsed in sorted(first.items()):
        if parsed["outcome"] == "correct":
            first_correct.setdefault(question, attempt + 1)
    kept_steps = [n for n in steps if n["is_selected"]]
    return {
        "questions": questions,
        "kept_share": round(len(kept) / questions, 3),
        "paper_kept_share": round(PAPER_KEPT_SHARE, 3),
        "attempts_per_kept": round(len(first) / len(kept), 2) if kept else None,
        "attempts_to_first_correct": round(sum(first_correct.values()) / len(first_correct), 2)
        if first_correct
        else None,
        "steps_per_kept": round(len(kept_steps) / len(kept), 2) if kept else None,
        "outcomes": dict(Counter(p["outcome"] for p in first.values())),
        "malformed_steps": sum(n["is_format_error"] for n in steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=16)
    args = parser.parse_args()
    questions, retriever, backend = embedded_search("hotpotqa", args.questions)
    counting = CountingBackend(backend)
    start = time.perf_counter()
    rows = asyncio.run(
        expand_shard("r3", questions, Batcher(counting), retriever, CONFIG, "bench-r3", 0, len(questions))
    )
    wall = time.perf_counter() - start
    judged = [c for c in counting.calls if c["judge"]]
    judge_requests = sum(c["judge"] for c in judged)
    row = summarise(rows.nodes, len(questions)) | {
        "engine_calls": len(counting.calls),
        "judge_requests_per_question": round(judge_requests / len(questions), 2),
        "judge_requests_per_judged_call": round(judge_requests / len(judged), 2) if judged else None,
        "judge_share_beside_policy": round(sum(c["judge"] for c in judged if c["policy"]) / judge_requests, 3)
        if judge_requests
        else None,
        "mean_batch": round(counting.requests / len(counting.calls), 2),
        "tokens": counting.tokens,
        "wall_s": round(wall, 1),
    }
    report("r3", [row])


if __name__ == "__main__":
    main()
