"""Engine calls of concurrent shards through the request scheduler: a demo-shaped load, a
simulated engine, one run per token budget (``tasks/llm/scheduler.py``).

Five shards (the demo's five strategies), each on its own thread and event loop as the build's
local runner runs them, share one engine. Each shard runs 8 questions at once (the demo's
``max_in_flight``); a question takes 4 steps, each one request and then 3 gathered requests (a
fan-out), with a simulated retrieval of 1-20 ms between steps. Prompts grow with the step
(~300 to ~1,800 estimated tokens: the sizes of a demo build's ``llm_calls``), ``max_tokens``
256. The engine sleeps 20 ms + 2 ms per row per call and answers each row from its seed alone,
so outputs never depend on batches; it records each call's requests and estimated tokens.

Reported per budget: engine calls, mean and largest requests per call, the largest estimated
tokens of one call (what a real engine's KV cache holds at once scales with it) and wall time.
The default budget must leave the calls as they are without a budget; a small one must cap the
tokens per call and only add calls. Wall time is noisy on a shared machine; compare calls.

Run: .venv/bin/python benchmarks/scheduling.py [--budgets 131072 32768 8192] [--shards 5]
Writes benchmarks/results/scheduling.json.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

from ragfactory.tasks.llm.batcher import Batcher, BatcherConfig  # noqa: E402
from ragfactory.tasks.llm.types import Completion, Request  # noqa: E402

STEPS, FAN_OUT, IN_FLIGHT, MAX_TOKENS = 4, 3, 8, 256


class SimulatedEngine:
    """A static-batch engine whose call time grows with its rows; records every call."""

    fingerprint = "simulated-v1"

    def __init__(self):
        self.calls: list[tuple[int, int]] = []  # (requests, estimated tokens) per call
        self._lock = threading.Lock()

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        tokens = sum(r.sampling.n * (-(-len(r.messages[-1].content) // 3) + r.sampling.max_tokens) for r in requests)
        with self._lock:
            self.calls.append((len(requests), tokens))
        time.sleep(0.02 + 0.002 * sum(r.sampling.n for r in requests))
        return [
            [Completion(f"answer {r.sampling.seed + i}", completion_tokens=8) for i in range(r.sampling.n)]
            for r in requests
        ]


def shared_engine(engine: SimulatedEngine):
    """The process-wide object shards share: the scheduler (or, before it, the coalescer)."""
    try:
        from ragfactory.tasks.llm.scheduler import Scheduler
    except ImportError:  # a checkout from before the scheduler
        from ragfactory.tasks.llm.coalesce import CoalescingBackend

        return CoalescingBackend(engine)
    return Scheduler(engine)


async def question(batcher: Batcher, shard: int, q: int, rng: random.Random) -> int:
    answered = 0
    for step in range(STEPS):
        prompt = f"shard {shard} question {q} step {step} " + "passage text " * (70 + 110 * step)
        await batcher.generate(
            Request.chat(
                [{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS, seed=1000 * shard + 10 * q + step
            )
        )
        branches = await asyncio.gather(
            *(
                batcher.generate(
                    Request.chat([{"role": "user", "content": f"{prompt} branch {b}"}], max_tokens=MAX_TOKENS, seed=b)
                )
                for b in range(FAN_OUT)
            )
        )
        answered += len(branches) + 1
        await asyncio.sleep(rng.uniform(0.001, 0.02))  # the retrieval between steps
    return answered


def run(budget: int | None, shards: int) -> dict:
    engine = SimulatedEngine()
    shared = shared_engine(engine)
    limits = BatcherConfig() if budget is None else BatcherConfig(max_batch_tokens=budget)

    def shard(index: int) -> None:
        batcher, rng = Batcher(shared, config=limits), random.Random(index)
        jobs = [lambda q=q: question(batcher, index, q, rng) for q in range(IN_FLIGHT)]
        asyncio.run(batcher.run_all(jobs, IN_FLIGHT))

    start = time.perf_counter()
    threads = [threading.Thread(target=shard, args=(i,)) for i in range(shards)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    sizes = [size for size, _ in engine.calls]
    return {
        "budget": budget or "none",
        "requests": sum(sizes),
        "engine_calls": len(sizes),
        "mean_batch": round(sum(sizes) / len(sizes), 1),
        "max_batch": max(sizes),
        "max_call_tokens": max(tokens for _, tokens in engine.calls),
        "wall_s": round(time.perf_counter() - start, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budgets", type=int, nargs="*", default=[131_072, 32_768, 8_192])
    parser.add_argument("--shards", type=int, default=5)
    args = parser.parse_args()
    budgets = args.budgets if "max_batch_tokens" in BatcherConfig.__dataclass_fields__ else [None]
    report("scheduling", [run(budget, args.shards) for budget in budgets])


if __name__ == "__main__":
    main()
