"""DecEx-RAG expansion cost: engine calls per question, pruned against "No Pruning Search".

Table 2 of the DecEx-RAG paper gives theoretical expansion counts for k = 3, n = 4,
T_max = 4: (4k + 3knl)·l with pruning and Σ_{i=1..l} i²(4k + 3knl) without, and measured
expansion times of 134.9 s and 743.2 s per question (5.5x). This script expands questions with
a scripted policy that never terminates early, never lets a self-answer clear the threshold,
and makes every rollout search until its turn limit (T_max turns, the paper's l per rollout),
so every layer costs the worst case. It counts, per question, the requests strategies send
(``generate`` calls), the samples generated (requests x n), the batched engine calls and the
retrieval queries, and compares the samples with the paper's formulas and with our own count:
one termination vote per state at T_max on top of (4k + 3knl) per expanded state, where
pruning expands one state per layer and no pruning 2^(i-1) at layer i (§4.1: "2^l").

Run: COLUMNS=220 .venv/bin/python benchmarks/decex_calls.py [--questions 8]  (COLUMNS: full table)
Writes benchmarks/results/decex_calls.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

from ragfactory.tasks.llm.batcher import Batcher  # noqa: E402
from ragfactory.tasks.llm.types import Completion, Request  # noqa: E402
from ragfactory.tasks.retrieval.types import Hit  # noqa: E402
from ragfactory.tasks.search.decex.expansion import DecExConfig, expand_question  # noqa: E402

CONFIG = DecExConfig(k=3, n_rollouts=4, t_max=4, top_k=3, termination_samples=3, rollout_max_turns=4)
PAPER_TIME_S = {"pruned": 134.9, "no_pruning": 743.2}  # Table 2, average extension time


class WorstCaseBackend:
    """A scripted engine: distinct sub-steps, wrong self-answers, rollouts that always search."""

    fingerprint = "decex-worst-case"

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        return [[Completion(self.reply(r, i)) for i in range(r.sampling.n)] for r in requests]

    @staticmethod
    def reply(request: Request, sample: int) -> str:
        prompt = request.messages[0].content
        tag = f"{request.sampling.seed % 10_000}-{sample}"  # distinct, so nothing deduplicates
        if len(request.messages) > 1 or "Please continue reasoning" in prompt:
            return f"I still lack facts. <search> fact {tag} </search>"
        if "Please judge based on the available information" in prompt:
            return f"<reasoning>Not enough.</reasoning> <question>next {tag}</question>"
        if "break down the original question" in prompt:
            return f"Next step. <question>sub-question {tag}</question>"
        if prompt.startswith("We will provide you with a question, please answer"):
            return f"<answer>wrong {tag}</answer>"
        return f"query {tag}"


class CountingRetriever:
    def __init__(self):
        self.queries = 0

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.queries += len(queries)
        return [[Hit(f"p{j}", f"T{j}", "text", 1.0) for j in range(k)] for _ in queries]


def expand_all(config: DecExConfig, n_questions: int) -> dict:
    batcher, retriever = Batcher(WorstCaseBackend()), CountingRetriever()
    questions = [
        {"question_id": f"q{i}", "question": f"Question {i}?", "golden_answers": ["gold"]} for i in range(n_questions)
    ]

    async def main():
        jobs = [lambda q=q: expand_question(q, batcher, retriever, config, "bench", 0) for q in questions]
        return await batcher.run_all(jobs, max_in_flight=n_questions)

    start = time.perf_counter()
    trees = asyncio.run(main())
    wall = time.perf_counter() - start
    stats = batcher.stats
    return {
        "requests_per_q": stats.requests / n_questions,
        "samples_per_q": stats.rows / n_questions,
        "engine_calls": stats.engine_calls,
        "mean_batch": round(stats.mean_batch_size, 1),
        "retrieval_queries_per_q": retriever.queries / n_questions,
        "nodes_per_q": sum(len(t.nodes) for t in trees) / n_questions,
        "rollouts_per_q": sum(len(t.rollouts) for t in trees) / n_questions,
        "wall_s": round(wall, 2),
    }


def paper_counts(c: DecExConfig) -> dict[str, int]:
    per_state = 4 * c.k + 3 * c.k * c.n_rollouts * c.t_max
    return {
        "pruned": per_state * c.t_max,
        "no_pruning": sum(i * i * per_state for i in range(1, c.t_max + 1)),
    }


def our_counts(c: DecExConfig) -> dict[str, int]:
    per_state = 4 * c.k + 3 * c.k * c.n_rollouts * c.rollout_max_turns
    return {
        "pruned": per_state * c.t_max + c.termination_samples,
        "no_pruning": (2**c.t_max - 1) * per_state + 2**c.t_max * c.termination_samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=8)
    args = parser.parse_args()
    paper, ours = paper_counts(CONFIG), our_counts(CONFIG)
    rows = []
    modes = [("pruned", CONFIG), ("no_pruning", replace(CONFIG, no_pruning=True))]
    for mode, config in modes:
        measured = expand_all(config, args.questions)
        rows.append(
            {
                "mode": mode,
                "questions": args.questions,
                **measured,
                "predicted_samples": ours[mode],
                "paper_theoretical": paper[mode],
                "paper_time_s": PAPER_TIME_S[mode],
            }
        )
    pruned, full = rows
    rows.append(
        {
            "mode": "ratio no_pruning/pruned",
            "requests_per_q": round(full["requests_per_q"] / pruned["requests_per_q"], 2),
            "samples_per_q": round(full["samples_per_q"] / pruned["samples_per_q"], 2),
            "retrieval_queries_per_q": round(full["retrieval_queries_per_q"] / pruned["retrieval_queries_per_q"], 2),
            "predicted_samples": round(ours["no_pruning"] / ours["pruned"], 2),
            "paper_theoretical": round(paper["no_pruning"] / paper["pruned"], 2),
            "paper_time_s": round(PAPER_TIME_S["no_pruning"] / PAPER_TIME_S["pruned"], 2),
        }
    )
    report("decex_calls", rows)


if __name__ == "__main__":
    main()
