"""Batching efficiency and rebuild benchmarks on the transformers backend (docs/architecture.md,
"Core contracts": Generator and Backend).

Efficiency: 16 questions run through a fixed 3-step strategy (plan, sub-answer, tagged final
answer; each step depends on the previous text) by the batcher; its tokens/s is divided by the
tokens/s of the very same requests sent by hand as one engine batch per step. Target >= 0.9.
Rebuild: a second identical build (new backend object, same warehouse) makes 0 engine calls and
takes <= 10 % of the first build's time; both builds are timed from backend construction to
the written ``llm_calls`` shard, the first including the model load.

The machine is shared, so passes run build, hand, hand, build (a drift in load hits both sides
alike), each pass is reported, and the ratio is also given in process CPU time.

Run: .venv/bin/python benchmarks/batching.py [--questions 16] [--max-tokens 32] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib.resources import files
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from ragfactory.tasks.llm.batcher import Batcher, BatcherConfig  # noqa: E402
from ragfactory.tasks.llm.cache import CallCache  # noqa: E402
from ragfactory.tasks.llm.embedded import embedded_model_path  # noqa: E402
from ragfactory.tasks.llm.seeds import derive_seed  # noqa: E402
from ragfactory.tasks.llm.transformers_backend import (  # noqa: E402
    TransformersBackend,
    TransformersSettings,
)
from ragfactory.tasks.llm.types import Request  # noqa: E402
from ragfactory.warehouse.store import Warehouse  # noqa: E402

STEPS = (
    "Break this question into the sub-questions needed to answer it.\nQuestion: {question}",
    "Question: {question}\nPlan: {previous}\nAnswer the first sub-question in one sentence.",
    "Question: {question}\nNotes: {previous}\nGive the final answer inside <answer></answer> tags.",
)


@dataclass(frozen=True)
class BenchSettings:
    questions: int = 16  # the count the batching target is stated for
    max_tokens: int = 32  # keeps the whole benchmark to a few minutes on 2 cores
    temperature: float = 0.7  # sampled, so per-row seeding is exercised
    run_seed: int = 0
    max_batch_rows: int = 32  # transformers rows per forward pass


def load_questions(n: int) -> list[tuple[str, str]]:
    lines = (files("ragfactory.data") / "hotpotqa" / "dev.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()][:n]
    return [(row["_id"], row["question"]) for row in rows]


def step_request(qid: str, question: str, step: int, previous: str, bench: BenchSettings) -> Request:
    prompt = STEPS[step].format(question=question, previous=previous.strip()[:300])
    return Request.chat(
        [{"role": "user", "content": prompt}],
        max_tokens=bench.max_tokens,
        temperature=bench.temperature,
        seed=derive_seed(bench.run_seed, qid, str(step)),
    )


async def fixed_strategy(generator, qid: str, question: str, bench: BenchSettings) -> list[str]:
    texts = [""]
    for step in range(len(STEPS)):
        [completion] = await generator.generate(step_request(qid, question, step, texts[-1], bench))
        texts.append(completion.text)
    return texts[1:]


@dataclass
class Clock:
    """Wall and process CPU time of a section; CPU time is robust to other load on the machine."""

    wall_s: float = 0.0
    cpu_s: float = 0.0

    def add(self, fn):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return fn()
        finally:
            self.wall_s += time.perf_counter() - wall
            self.cpu_s += time.process_time() - cpu


def build(root: Path, model: Path, bench: BenchSettings, questions, backend=None, warm: bool = False) -> dict:
    """One build: backend, cache lookups, generation through the batcher, llm_calls written.

    Without ``backend`` a new one is made (fingerprinted, loaded only if a call misses);
    ``warm`` loads it and runs a tiny batch first. ``generation`` times the batcher alone,
    ``build_s`` everything (model load included).
    """
    started = time.perf_counter()
    if backend is None:
        settings = TransformersSettings(device="cpu", max_batch_size=bench.max_batch_rows)
        backend = TransformersBackend(model, settings)
    if warm:  # the first passes at a batch width allocate; keep that out of the comparison
        hello = Request.chat([{"role": "user", "content": "hi"}], max_tokens=4)
        backend.generate_batch([hello] * len(questions))
    warehouse = Warehouse(root)
    cache = CallCache.from_warehouse(warehouse, run_id="bench")
    batcher = Batcher(backend, cache, BatcherConfig(max_batch_size=64))
    jobs = [lambda q=q, text=text: fixed_strategy(batcher, q, text, bench) for q, text in questions]
    generation = Clock()
    outputs = generation.add(lambda: asyncio.run(batcher.run_all(jobs, len(questions))))
    path = cache.write(warehouse, shard="shard-0")
    return {
        "build_s": time.perf_counter() - started,
        "generation": generation,
        "tokens": sum(c["completion_tokens"] for c in cache.rows()),
        "outputs": outputs,
        "stats": batcher.stats.as_dict(),
        "table": pq.read_table(path),
        "backend": backend,
        "bench": bench,
    }


def by_hand(backend: TransformersBackend, bench: BenchSettings, questions) -> dict:
    """The same requests as one engine batch per step, no batcher, no cache.

    The batches run in a worker thread, as the batcher's do: torch's CPU thread pool behaves
    differently from the main thread on a loaded machine, and the ratio should measure the
    batcher, not that.
    """
    previous = {qid: "" for qid, _ in questions}
    clock, tokens, outputs = Clock(), 0, {qid: [] for qid, _ in questions}
    pool = ThreadPoolExecutor(1)
    for step in range(len(STEPS)):
        requests = [step_request(q, text, step, previous[q], bench) for q, text in questions]
        answers = clock.add(lambda requests=requests: pool.submit(backend.generate_batch, requests).result())
        for (qid, _), [completion] in zip(questions, answers):
            previous[qid] = completion.text
            outputs[qid].append(completion.text)
            tokens += completion.completion_tokens
    return {"generation": clock, "tokens": tokens, "outputs": [outputs[q] for q, _ in questions]}


def efficiency_row(builds: list[dict], hands: list[dict], common: dict) -> dict:
    def rate(passes, attr):
        seconds = sum(getattr(p["generation"], attr) for p in passes)
        return sum(p["tokens"] for p in passes) / seconds

    wall = rate(builds, "wall_s") / rate(hands, "wall_s")
    stats = builds[0]["stats"]
    return {
        "benchmark": "batching_efficiency",
        **common,
        "build_passes_tok_per_s": [round(rate([p], "wall_s"), 2) for p in builds],
        "hand_passes_tok_per_s": [round(rate([p], "wall_s"), 2) for p in hands],
        "build_tok_per_s": round(rate(builds, "wall_s"), 2),
        "hand_tok_per_s": round(rate(hands, "wall_s"), 2),
        "efficiency": round(wall, 3),
        "efficiency_cpu_time": round(rate(builds, "cpu_s") / rate(hands, "cpu_s"), 3),
        "target": 0.9,
        "meets_target": wall >= 0.9,
        "mean_batch_size": stats["mean_batch_size"],
        "engine_calls": stats["engine_calls"],
        "build_tokens": builds[0]["tokens"],
        "hand_tokens": hands[0]["tokens"],
        "questions_same_texts_as_hand": sum(a == b for a, b in zip(builds[0]["outputs"], hands[0]["outputs"])),
        "settings": asdict(builds[0]["bench"]),
    }


def rebuild_row(first: dict, second: dict, common: dict) -> dict:
    ratio = second["build_s"] / first["build_s"]
    return {
        "benchmark": "rebuild",
        **common,
        "first_build_s": round(first["build_s"], 2),
        "second_build_s": round(second["build_s"], 3),
        "ratio": round(ratio, 4),
        "target": 0.10,
        "meets_target": ratio <= 0.10 and second["stats"]["engine_calls"] == 0,
        "second_engine_calls": second["stats"]["engine_calls"],
        "identical_llm_calls": second["table"].equals(first["table"]),
        "identical_outputs": second["outputs"] == first["outputs"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--questions", type=int, default=BenchSettings.questions)
    parser.add_argument("--max-tokens", type=int, default=BenchSettings.max_tokens)
    parser.add_argument("--models", type=Path, default=None, help="embedded model cache folder")
    parser.add_argument("--rounds", type=int, default=1, help="build-hand-hand-build rounds")
    args = parser.parse_args()
    bench = BenchSettings(questions=args.questions, max_tokens=args.max_tokens)
    model = embedded_model_path(args.models or Warehouse().artifacts_dir("models"))
    questions = load_questions(bench.questions)
    common = {
        "questions": bench.questions,
        "steps": len(STEPS),
        "max_tokens": bench.max_tokens,
        "cpu_load_1m_before": round(os.getloadavg()[0], 2),
        "torch_threads": _threads(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        first = build(root / "a", model, bench, questions, warm=True)  # includes the model load
        backend = first["backend"]
        builds, hands = [first], []
        # build, hand, hand, build per round: a drift in machine load hits both sides alike
        for round_ in range(args.rounds):
            if round_:
                builds.append(build(root / f"b{round_}", model, bench, questions, backend))
            hands += [by_hand(backend, bench, questions) for _ in range(2)]
            builds.append(build(root / f"c{round_}", model, bench, questions, backend))
        second = build(root / "a", model, bench, questions)  # the rebuild: new backend object
    common["cpu_load_1m_after"] = round(os.getloadavg()[0], 2)
    show("batching", [efficiency_row(builds, hands, common), rebuild_row(first, second, common)])


def show(name: str, rows: list[dict]) -> None:
    """One metric/value table per benchmark, and benchmarks/results/<name>.json."""
    console = Console()
    for row in rows:
        table = Table(title=f"{name}: {row['benchmark']}")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for key, value in row.items():
            if key not in {"benchmark", "settings"}:
                text = f"{value:.4g}" if isinstance(value, float) else str(value)
                table.add_row(key, text)
        console.print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(rows, indent=2) + "\n")


def _threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
