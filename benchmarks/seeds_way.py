"""The seeds' way against the factory: DecEx and TreePS on the same questions, engine and seeds.

The papers' reference code grows one question's tree at a time and sends one request at a time
to the model. The factory runs a shard's questions together (``llm.max_in_flight``) through the
batcher, which merges their requests into engine batches. Both ways here expand the first N
bundled HotpotQA questions with ``configs/demo.yaml``'s DecEx and TreePS settings (the papers'
trees scaled to fit a CPU) on one loaded engine, each with an empty call cache:

- seeds' way: ``max_in_flight`` 1 and ``max_batch_size`` 1 (a request's n samples still travel
  together, as the reference code samples them);
- factory: ``max_in_flight`` N, the batcher's ``max_batch_size`` from the config.

Reported per strategy: wall seconds, generated tokens per second, engine calls and their mean
size, and the factory's speed-up in tokens per second (goal >= 2.5 on the CPU transformers
engine). Engine utilisation: the very requests the factory sent are then sent again, all at once
(in engine calls of ``max_batch_size``), and the factory's tokens per second is divided by that
standalone throughput (goal >= 0.8). The token counts of the two ways differ a little (a batched row's sample differs from
the same seed alone only through padding numerics), which is why tokens per second, not wall
time alone, is the measure.

Run: .venv/bin/python benchmarks/seeds_way.py [--questions 16] [--strategies decex treeps]
Writes benchmarks/results/seeds_way.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CountingBackend, report  # noqa: E402

from ragfactory.flows.config import load_build_config  # noqa: E402
from ragfactory.tasks.data.loaders import load_bundled  # noqa: E402
from ragfactory.tasks.llm.batcher import Batcher, BatcherConfig  # noqa: E402
from ragfactory.tasks.llm.cache import CallCache  # noqa: E402
from ragfactory.tasks.llm.engine import ROLES, make_backends  # noqa: E402
from ragfactory.tasks.retrieval.bm25 import BM25Retriever  # noqa: E402
from ragfactory.tasks.search.registry import STRATEGIES  # noqa: E402
from ragfactory.tasks.search.shard import expand_shard  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


class Recording(CountingBackend):
    """The engine, keeping every request it is sent."""

    def __init__(self, inner):
        super().__init__(inner)
        self.sent = []

    def generate_batch(self, requests):
        self.sent.extend(requests)
        return super().generate_batch(requests)


def standalone(engine, requests, batch: int) -> float:
    """Tokens per second of ``requests`` sent at once, ``batch`` per engine call."""
    tokens, start = 0, time.perf_counter()
    for begin in range(0, len(requests), batch):
        answers = engine.generate_batch(requests[begin : begin + batch])
        tokens += sum(c.completion_tokens for samples in answers for c in samples)
    return tokens / (time.perf_counter() - start)


def expand(strategy: str, config, questions, engines, retriever, in_flight: int, batch: int) -> dict:
    llm = config.llm
    free = frozenset(name for name in ROLES if not llm.role(name).structured)
    batcher = Batcher(engines, CallCache(f"bench-{strategy}"), BatcherConfig(max_batch_size=batch), free)
    settings = STRATEGIES.get(strategy).settings(config.search)
    start = time.perf_counter()
    rows = asyncio.run(expand_shard(strategy, questions, batcher, retriever, settings, "bench", config.seed, in_flight))
    wall = time.perf_counter() - start
    tokens = sum(row["completion_tokens"] for row in batcher.cache.rows())
    return {
        "wall_s": round(wall, 1),
        "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "engine_calls": batcher.stats.engine_calls,
        "mean_batch": round(batcher.stats.mean_batch_size, 1),
        "nodes": len(rows.nodes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--strategies", nargs="+", default=["decex", "treeps"])
    parser.add_argument("--config", default=str(REPO / "configs" / "demo.yaml"))
    args = parser.parse_args()
    config = load_build_config(args.config)
    data = load_bundled("hotpotqa", limit=args.questions)
    retriever = BM25Retriever.build(pa.Table.from_pylist(data.passages))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        engines = make_backends(config.llm, Path(tmp) / "models")
        engine = engines["policy"].backend  # the model behind the process's scheduler
        engine.load()  # the model load is in neither way's time
        for strategy in args.strategies:
            seeds = expand(strategy, config, data.questions, engines, retriever, 1, 1)
            recording = Recording(engine)
            factory = expand(
                strategy,
                config,
                data.questions,
                {"policy": recording, "judge": recording},
                retriever,
                args.questions,
                config.llm.max_batch_size,
            )
            alone = standalone(engine, recording.sent, config.llm.max_batch_size)
            for way, figures in (("seeds' way", seeds), ("factory", factory)):
                rows.append({"strategy": strategy, "way": way, "questions": args.questions, **figures})
            rows[-1]["speed_up"] = round(factory["tokens_per_s"] / seeds["tokens_per_s"], 2)
            rows[-1]["meets_2_5x"] = rows[-1]["speed_up"] >= 2.5
            rows[-1]["standalone_tokens_per_s"] = round(alone, 1)
            rows[-1]["utilisation"] = round(factory["tokens_per_s"] / alone, 2)
    report("seeds_way", rows)


if __name__ == "__main__":
    main()
