"""Shared helpers for the benchmark scripts: timing, result files and the summary table."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).resolve().parent / "results"


def median_seconds(fn: Callable[[], object], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed_command(command: list[str], log: Path, cwd: Path | None = None, env: dict | None = None) -> dict:
    """Run ``command`` with its output in ``log`` (``env`` added to this process's environment);
    its wall, user and system seconds, system share, minor page faults and peak resident memory
    (``os.wait4``: this process tree alone). Exits naming the log where the command fails."""
    start = time.perf_counter()
    with log.open("w") as out:
        child = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env={**os.environ, **(env or {})}
        )
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{command[1:3]} failed ({status}); see {log}")
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "wall_s": round(wall, 1),
        "user_s": round(usage.ru_utime, 1),
        "sys_s": round(usage.ru_stime, 1),
        "sys_share": round(usage.ru_stime / cpu, 3) if cpu else None,
        "minor_faults_m": round(usage.ru_minflt / 1e6, 2),
        "peak_gib": round(usage.ru_maxrss / (1 << 20), 2),  # ru_maxrss is in KiB
    }


def report(name: str, rows: list[dict]) -> None:
    """Print rows as a table and save them to benchmarks/results/<name>.json.

    A row with ``target_s`` and ``measured_s`` gets ``ratio`` = target / measured: above 1 meets
    the target with that much room, below 1 misses it.
    """
    for row in rows:
        if "target_s" in row and "measured_s" in row:
            row["ratio"] = round(row["target_s"] / row["measured_s"], 2)
            row["meets_target"] = row["measured_s"] <= row["target_s"]
    table = Table(title=name)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_fmt(row.get(c)) for c in columns))
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(rows, indent=2))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


class CountingBackend:
    """A backend wrapper recording each engine call: the roles of its requests (``calls``, one
    Counter per call) and the completion tokens generated (``tokens``)."""

    def __init__(self, inner):
        self.inner, self.fingerprint = inner, inner.fingerprint
        self.calls: list[Counter] = []
        self.tokens = 0

    @property
    def requests(self) -> int:
        return sum(sum(call.values()) for call in self.calls)

    def generate_batch(self, requests):
        out = self.inner.generate_batch(requests)
        self.calls.append(Counter(r.role for r in requests))
        self.tokens += sum(c.completion_tokens for samples in out for c in samples)
        return out


def embedded_search(dataset: str, n_questions: int):
    """(the first ``n_questions`` bundled questions of ``dataset``, BM25 over its paragraphs, the
    embedded model as a CPU transformers backend)."""
    from ragfactory.tasks.data.loaders import load_bundled
    from ragfactory.tasks.llm.embedded import embedded_model_path
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
    from ragfactory.tasks.retrieval.bm25 import BM25Retriever
    from ragfactory.warehouse.store import Warehouse, conform

    data = load_bundled(dataset)
    retriever = BM25Retriever.build(conform("passages", data.passages))
    model = embedded_model_path(Warehouse().artifacts_dir("models"))
    return data.questions[:n_questions], retriever, TransformersBackend(model, TransformersSettings(device="cpu"))


NULL_STRATEGIES = ("decex", "treeps", "mcts", "r3", "apex")
DEMO_SIZES = {  # configs/demo.yaml's tree sizes, for builds that must stay short
    "decex": {"k": 2, "n_rollouts": 2, "t_max": 1, "min_iterations": 1, "termination_samples": 3},
    "treeps": {"n": 4, "depth": 2, "temperature": 0.7},
    "mcts": {"iterations": 6, "max_depth": 4, "min_queries": 1, "temperature": 0.7},
    "r3": {"n_attempts": 3, "max_iterations": 2, "min_queries": 1, "answer_at_limit": True},
    "apex": {"n_plans": 2, "max_steps": 2, "max_hops": 1, "execute_gold": False},
}


def null_build_config(root, questions: int, strategies=NULL_STRATEGIES, backend: str = "null", **search) -> dict:
    """A build of ``strategies`` at their config defaults (the papers' parameters) on the null
    engine, over about ``questions`` bundled train questions: the demo's datasets and partitions,
    an equal share of the questions from each of its three train datasets, BM25 only."""
    per_dataset = -(-questions // 3)
    return {
        "name": "null-bench",
        "warehouse": {"root": str(root)},
        "datasets": [{"name": n} for n in ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle")],
        "partitions": {"seed": 0, "shares": {"train": 0.8, "valid": 0.1, "test": 0.1}, "eval_only": ["bamboogle"]},
        "corpus": {"from_datasets": True},
        "retrieval": {"default": "bm25", "dense": {"enabled": False}},
        "llm": {"policy": {"backend": backend, "model": "embedded"}},
        "search": {
            "strategies": list(strategies),
            "partition": "train",
            "datasets": ["hotpotqa", "2wikimultihopqa", "musique"],
            "questions_per_dataset": per_dataset,
            **search,
        },
    }
