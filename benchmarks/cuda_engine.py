"""The embedded engine on a CUDA device: prefill and decode rates by rows, dtype and KV budget.

The transformers backend sizes its running batch by device (``tasks/llm/decode_memory.py``
``device_budget``): on a CPU 32 rows a forward pass and a 256 MB KV budget (about five rows of a
1,000-token prompt in float32), on CUDA 256 rows and a quarter of the free memory up to 8 GiB. On
a GPU worker the same engine runs the same code; this measures the CPU's budget there against
the device's. For each dtype and budget, and each number of rows:

- a prefill call: ``rows`` distinct prompts of about ``--prompt-tokens`` tokens, one new token
  each (prefix reuse off, so every prompt token is computed): prompt tokens a second;
- a decode call: the same prompts, ``--new-tokens`` greedy tokens each: completion tokens a
  second over the call's wall less the prefill call's;

with the device's peak allocated memory. ``--random-weights`` builds the model's architecture
(its ``config.json`` and tokenizer, from ``--model``) with random weights, for a machine without
the embedded GGUF: the rates depend on the shapes, not the values (a random model may stop a row
early, so the table counts the tokens each call produced).

Run: .venv/bin/python benchmarks/cuda_engine.py [--model FOLDER] [--random-weights] [--rows 8 32 128]
Writes benchmarks/results/cuda_engine.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

# (kv_cache_mb, max_batch_size): a CPU's defaults, and the engine's on CUDA (None: the device's,
# tasks/llm/decode_memory.py device_budget: a quarter of the free memory up to 8 GiB, 256 rows)
BUDGETS = ((256.0, 32), (None, None))


def random_model(source: Path, folder: Path) -> Path:
    """``source``'s architecture and tokenizer with random weights, saved in ``folder``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    for name in source.iterdir():
        if name.suffix in (".json", ".jinja", ".txt", ".model"):
            shutil.copy(name, folder / name.name)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source)).save_pretrained(folder)
    return folder


def rates(model: str, dtype: str, kv_mb: float | None, batch: int | None, args: argparse.Namespace) -> list[dict]:
    import torch

    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
    from ragfactory.tasks.llm.types import Request

    settings = TransformersSettings(
        device="cuda", dtype=dtype, prefix_reuse=False, kv_cache_mb=kv_mb, max_batch_size=batch
    )
    engine = TransformersBackend(model, settings)
    engine.load()
    words = " ".join(f"fact {k} says item {k} weighs {k * 7} grams." for k in range(args.prompt_tokens // 14))
    rows = []
    for count in args.rows:

        def call(tokens: int, count: int = count) -> tuple[float, list]:
            requests = [
                Request.chat([{"role": "user", "content": f"Case {p}. " + words}], max_tokens=tokens, temperature=0.0)
                for p in range(count)
            ]
            torch.cuda.synchronize()
            wall = time.perf_counter()
            answers = engine.generate_batch(requests)
            torch.cuda.synchronize()
            return time.perf_counter() - wall, answers

        call(1)  # warm-up: kernels chosen and compiled for these shapes
        torch.cuda.reset_peak_memory_stats()
        prefill_s, answers = call(1)
        decode_s, answers = call(args.new_tokens)
        completion = sum(a[0].completion_tokens for a in answers)
        prompt = sum(a[0].prompt_tokens for a in answers)
        rows.append(
            {
                "dtype": dtype,
                "kv_cache_mb": engine.settings.kv_cache_mb,
                "max_batch_size": engine.settings.max_batch_size,
                "rows": count,
                "prompt_tokens": prompt,
                "prefill_tok_s": round(prompt / prefill_s),
                "completion_tokens": completion,
                "decode_tok_s": round(completion / max(decode_s - prefill_s, 1e-9), 1),
                "decode_call_s": round(decode_s, 2),
                "gpu_peak_mb": round(torch.cuda.max_memory_allocated() / 2**20),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="a checkpoint folder, or embedded")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "ragfactory" / "bench-models"))
    parser.add_argument("--random-weights", action="store_true", help="the model's shapes, random weights")
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--prompt-tokens", type=int, default=400)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    args = parser.parse_args()
    from ragfactory.tasks.llm.embedded import resolve_model

    model = resolve_model(args.model, args.cache)
    with tempfile.TemporaryDirectory() as folder:
        if args.random_weights:
            model = str(random_model(Path(model), Path(folder)))
        table = [
            row
            for dtype in args.dtypes
            for kv_mb, batch in BUDGETS
            for row in rates(model, dtype, kv_mb, batch, args)  # each engine freed before the next
        ]
    report("cuda_engine", table)


if __name__ == "__main__":
    main()
