"""Peak memory of one engine call as it grows: the KV-bounded decode against the unbounded one.

One call of the embedded engine (SmolLM2-135M, float32, CPU) with ``rows`` requests of a
``tokens``-token prompt and 8 new tokens each, in a fresh process per case, so each peak is that
call's alone: peak resident memory (``ru_maxrss``) minus the resident memory once the model is
loaded. ``bounded`` runs ``kv_cache_mb`` 1024 and ``prefill_tokens`` 4096 (the figures in docs/memory.md; the default budget is now 256);
``unbounded`` sets both past any call here, which is how the engine decoded before either
existed (one chunk of up to 32 rows, one prefill pass). The figure to read is the growth ratio
from 8 to 32 rows: about 1 when memory is bounded by design, about 4 when it grows with the call.

    .venv/bin/python benchmarks/engine_memory.py [--tokens 1000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

CASE = """
import json, resource, sys
from ragfactory.tasks.llm.embedded import resolve_model
from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
from ragfactory.tasks.llm.types import Request
rows, tokens, bounded = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "bounded"
limits = {"kv_cache_mb": 1024.0} if bounded else {"kv_cache_mb": 1e6, "prefill_tokens": 10**9}
engine = TransformersBackend(resolve_model("embedded", sys.argv[4]),
                             TransformersSettings(device="cpu", **limits))
engine.load()
loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
word = " ".join(f"fact{i}" for i in range(tokens // 3))  # about three tokens a word
requests = [Request.chat([{"role": "user", "content": f"{r} {word}"}], max_tokens=8)
            for r in range(rows)]
prompt = len(engine.encode_prompt(requests[0]))
engine.generate_batch(requests)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"prompt_tokens": prompt, "loaded_mb": loaded / 1024, "call_mb": (peak - loaded) / 1024}))
"""


def measure(rows: int, tokens: int, mode: str, cache: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CASE, str(rows), str(tokens), mode, cache], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1000, help="prompt tokens per request")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "ragfactory" / "bench-models"))
    args = parser.parse_args()
    results = []
    for mode in ("bounded", "unbounded"):
        small, large = (measure(rows, args.tokens, mode, args.cache) for rows in (8, 32))
        results.append(
            {
                "engine": mode,
                "prompt_tokens": small["prompt_tokens"],
                "loaded_mb": round(small["loaded_mb"]),
                "call_8_rows_mb": round(small["call_mb"]),
                "call_32_rows_mb": round(large["call_mb"]),
                "growth_8_to_32": round(large["call_mb"] / max(small["call_mb"], 1.0), 2),
            }
        )
    report("engine_memory", results)


if __name__ == "__main__":
    main()
