"""The embedded engine in float32 and in bfloat16 on CPU: prefill and decode rates, one thread.

On a CPU with bf16 instructions (AVX512-BF16, AMX) bfloat16 matrix products run several times
faster than float32 ones, and weights, keys and values take half the memory; PyTorch's SDPA is
the exception for a single query token (``tasks/llm/half_attention.py``). This runs, each engine
in a process of its own at one thread (``OMP_NUM_THREADS=1``, as the test suite's workers run):

- a prefill call: ``--prompts`` distinct prompts of about ``--prompt-tokens`` tokens, one new
  token each (prefix reuse off, so every prompt token is computed): prompt tokens a second;
- a decode call: the same prompts, ``--new-tokens`` greedy tokens each: completion tokens a
  second over the call's wall less the prefill call's;

for float32, bfloat16 with the engine's decode attention, and bfloat16 with SDPA's (what the
attention replaces), with each process's peak memory and how many rows' tokens equal float32's.

Run: .venv/bin/python benchmarks/half_precision.py [--prompts 16] [--prompt-tokens 400] [--new-tokens 64]
Writes benchmarks/results/half_precision.json.
"""

from __future__ import annotations

import argparse
import json
import os
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
prompts, prompt_tokens, new = (int(a) for a in sys.argv[1:4])
dtype, attention, cache = sys.argv[4:7]
settings = TransformersSettings(device="cpu", dtype=dtype, prefix_reuse=False)
engine = TransformersBackend(resolve_model("embedded", cache), settings)
engine.load()
if attention != "engine":
    engine._model.config._attn_implementation = attention
words = " ".join(f"fact {k} says item {k} weighs {k * 7} grams." for k in range(prompt_tokens // 14))
def call(tokens):
    requests = [Request.chat([{"role": "user", "content": f"Case {p}. " + words}], max_tokens=tokens, temperature=0.0)
                for p in range(prompts)]
    wall = time.perf_counter()
    answers = engine.generate_batch(requests)
    return time.perf_counter() - wall, answers
prefill_s, answers = call(1)
decode_s, answers = call(new)
print(json.dumps({"prefill_s": prefill_s, "decode_s": decode_s, "prompt_tokens": sum(a[0].prompt_tokens for a in answers),
                  "completion_tokens": sum(a[0].completion_tokens for a in answers),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "ids": [a[0].completion_token_ids for a in answers]}))
"""

ENGINES = {"float32": ("float32", "engine"), "bfloat16": ("bfloat16", "engine"), "bfloat16, SDPA": ("bfloat16", "sdpa")}


def one(args: argparse.Namespace, dtype: str, attention: str) -> dict:
    numbers = (args.prompts, args.prompt_tokens, args.new_tokens)
    command = [sys.executable, "-c", CALL, *map(str, numbers), dtype, attention, args.cache]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=400)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "ragfactory" / "bench-models"))
    args = parser.parse_args()
    runs = {name: one(args, *engine) for name, engine in ENGINES.items()}
    base = runs["float32"]
    rows = []
    for name, run in runs.items():
        decode_s = run["decode_s"] - run["prefill_s"]
        rows.append(
            {
                "engine": name,
                "prefill_tok_s": round(run["prompt_tokens"] / run["prefill_s"]),
                "decode_tok_s": round(run["completion_tokens"] / decode_s, 1),
                "call_s": round(run["decode_s"], 2),
                "speedup": round(base["decode_s"] / run["decode_s"], 2),
                "peak_mb": round(run["peak_mb"]),
                "rows_as_float32": f"{sum(a == b for a, b in zip(run['ids'], base['ids']))}/{len(base['ids'])}",
            }
        )
    report("half_precision", rows)


if __name__ == "__main__":
    main()
