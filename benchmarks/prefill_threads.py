"""Prefill on one thread against all of torch's, on a quiet machine and on one whose cores are busy.

The transformers engine decodes on half the cores (``threads``: a decode step's small products
wait for a busy core, docs/engine.md "Threads") and prefills on ``prefill_threads`` (default:
every thread torch has). This measures that choice: ``--rows`` distinct prompts of about
``--prompt-tokens`` tokens, one new token each (the call is its prefill), ``prefix_reuse`` off,
on the embedded model, for each ``prefill_threads`` in ``--threads``, each in a process of its
own, first on a quiet machine and then beside ``--load`` processes that spin on a core each.
Wall and CPU seconds from ``getrusage`` around the call (after a warm-up call).

Run: .venv/bin/python benchmarks/prefill_threads.py [--rows 8] [--prompt-tokens 700] [--load 2]
Writes benchmarks/results/prefill_threads.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

CALL = """
import json, resource, sys, time
from ragfactory.tasks.llm.engine import resolve_model
from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
from ragfactory.tasks.llm.types import Request
rows, prompt_tokens, threads, cache = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
settings = TransformersSettings(device="cpu", prefix_reuse=False, prefill_threads=threads)
engine = TransformersBackend(resolve_model("embedded", cache), settings)
def batch(salt):
    words = " ".join(f"fact {k} says item {k} weighs {k * 7} grams." for k in range(prompt_tokens // 14))
    return [Request.chat([{"role": "user", "content": f"Case {salt}-{r}. " + words}], max_tokens=1) for r in range(rows)]
engine.generate_batch(batch("warm"))
before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
answers = engine.generate_batch(batch("timed"))
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": after.ru_utime - before.ru_utime
                  + after.ru_stime - before.ru_stime, "prompt_tokens": sum(a[0].prompt_tokens for a in answers)}))
"""


def _spin() -> None:
    while True:
        pass


def one(args: argparse.Namespace, threads: int, load: int) -> dict:
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(load)]
    for spinner in spinners:
        spinner.start()
    try:
        command = [sys.executable, "-c", CALL, str(args.rows), str(args.prompt_tokens), str(threads), args.cache]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    finally:
        for spinner in spinners:
            spinner.kill()
    figures = json.loads(out.splitlines()[-1])
    rate = figures["prompt_tokens"] / figures["wall_s"]
    return {"machine": f"{load} spinning" if load else "quiet", "prefill_threads": threads} | {
        "wall_s": round(figures["wall_s"], 2),
        "cpu_s": round(figures["cpu_s"], 2),
        "prompt_tokens": figures["prompt_tokens"],
        "tokens_per_s": round(rate, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=700)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--load", type=int, default=2, help="spinning processes for the busy runs")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "ragfactory" / "bench-models"))
    args = parser.parse_args()
    rows = [one(args, threads, load) for load in (0, args.load) for threads in args.threads]
    report("prefill_threads", rows)


if __name__ == "__main__":
    main()
