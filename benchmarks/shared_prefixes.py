"""Shared-prefix decoding against the plain running batch: ``n`` samples of each of a few prompts.

``shared_prefixes`` (docs/engine.md) holds a prompt's keys and values once for every row that
asks it; the plain running batch copies them into each row, so its KV budget fits about five
rows of a 1,300-token prompt a step. This measures ``--prompts`` distinct prompts of about
``--prompt-tokens`` tokens, ``--samples`` sampled rows each (temperature 0.8, ``--new-tokens``),
on the embedded model with the defaults otherwise, each engine in a process of its own: wall
time of the call, completion tokens a second, the process's peak resident memory, and whether
every row's token ids are the same. ``--dtype bfloat16`` runs both in half precision (docs/engine.md).

Run: .venv/bin/python benchmarks/shared_prefixes.py [--prompts 4] [--samples 8] [--new-tokens 64] [--dtype float32]
Writes benchmarks/results/shared_prefixes.json.
"""

from __future__ import annotations

import argparse
import json
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
prompts, samples, prompt_tokens, new, shared = (int(a) for a in sys.argv[1:6])
cache, dtype = sys.argv[6:8]
settings = TransformersSettings(device="cpu", dtype=dtype, shared_prefixes=bool(shared))
engine = TransformersBackend(resolve_model("embedded", cache), settings)
words = " ".join(f"fact {k} says item {k} weighs {k * 7} grams." for k in range(prompt_tokens // 14))
requests = [Request.chat([{"role": "user", "content": f"Case {p}. " + words}], max_tokens=new, temperature=0.8,
                         n=samples, seed=p) for p in range(prompts)]
engine.load()
wall = time.perf_counter()
answers = engine.generate_batch(requests)
wall = time.perf_counter() - wall
print(json.dumps({"wall_s": wall, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "prompt_tokens": answers[0][0].prompt_tokens,
                  "completion_tokens": sum(c.completion_tokens for a in answers for c in a),
                  "ids": [[c.completion_token_ids for c in a] for a in answers]}))
"""


def one(args: argparse.Namespace, shared: bool) -> dict:
    numbers = (args.prompts, args.samples, args.prompt_tokens, args.new_tokens, int(shared))
    command = [sys.executable, "-c", CALL, *map(str, numbers), args.cache, args.dtype]
    return json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=1300)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "ragfactory" / "bench-models"))
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="both engines' dtype")
    args = parser.parse_args()
    runs = {shared: one(args, shared) for shared in (False, True)}
    rows = [
        {
            "engine": "shared_prefixes" if shared else "plain",
            "prompt_tokens": run["prompt_tokens"],
            "wall_s": round(run["wall_s"], 2),
            "completion_tokens_per_s": round(run["completion_tokens"] / run["wall_s"], 1),
            "peak_mb": round(run["peak_mb"]),
            "same_ids": run["ids"] == runs[False]["ids"],
        }
        for shared, run in runs.items()
    ]
    rows[1]["speedup"] = round(runs[False]["wall_s"] / runs[True]["wall_s"], 2)
    report("shared_prefixes", rows)


if __name__ == "__main__":
    main()
