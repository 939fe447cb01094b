"""Prefix reuse in the embedded engine: the same tree-shaped engine calls with reuse off and on.

Seeded search trees, one engine call per depth, as a build's expansion makes them: every
question's root prompt starts with one long instruction (about 650 tokens, as an R3 evaluation's
prompts do), and each node's children repeat its prompt, its sampled completion and a passage,
then differ. Each engine (``prefix_reuse`` off, then on) runs in a fresh process, so its peak
resident memory (``ru_maxrss``) and CPU time (``getrusage``, user + system) are its own. Printed
per engine: wall and CPU seconds, prompt tokens against the tokens prefill computed, their ratio
(the target with reuse: at most 0.4 on tree-shaped requests), peak RSS, and, for reuse on, the
rows whose sampled tokens differ from the engine without reuse (float ties only: see
``tasks/llm/prefill.py``), the largest log-probability difference where they agree, and the
wall ratio off / on. Wall and CPU are as measured on the machine at the time: on a machine
shared with other work, a busy one, OpenMP threads that spin while they wait for a core inflate
CPU seconds too; the computed ratio does not depend on the machine.

    .venv/bin/python benchmarks/prefix_reuse.py [--questions 2 --branch 3 --depth 3]
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
import json, resource, sys, time
from ragfactory.tasks.llm.embedded import resolve_model
from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
from ragfactory.tasks.llm.types import Request
reuse, questions, branch, depth, max_tokens = sys.argv[1] == "on", *map(int, sys.argv[2:6])
engine = TransformersBackend(resolve_model("embedded", sys.argv[6]), TransformersSettings(device="cpu", prefix_reuse=reuse))
engine.load()
rules = " ".join(f"Rule {i}: cite the passage that supports each claim you make, number {i}." for i in range(40))
system = {"role": "system", "content": "You answer multi-hop questions by searching a corpus. " + rules}
level = [[system, {"role": "user", "content": f"Question {q}: who founded the city where writer {q} was born?"}]
         for q in range(questions)]
usage, wall, tokens, logprobs, prompts = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), [], [], []
for d in range(depth):
    requests = [Request.chat(m, max_tokens=max_tokens, temperature=0.8, seed=1000 * d + i) for i, m in enumerate(level)]
    answers = engine.generate_batch(requests)
    tokens += [list(a[0].completion_token_ids) for a in answers]
    logprobs += [list(a[0].completion_logprobs) for a in answers]
    prompts += [hash(a[0].prompt_token_ids) for a in answers]
    level = [m + [{"role": "assistant", "content": a[0].text},
                  {"role": "user", "content": f"Passage {d}.{b}: fact {b} about node {i}, found by search {d}."}]
             for i, (m, a) in enumerate(zip(level, answers)) for b in range(branch)]
wall, after = time.perf_counter() - wall, resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime - usage.ru_utime + after.ru_stime - usage.ru_stime
counts = engine.prefill_counts
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "prompt_tokens": counts.prompt_tokens,
                  "computed_tokens": counts.computed_tokens, "peak_rss_mb": after.ru_maxrss / 1024,
                  "tokens": tokens, "logprobs": logprobs, "prompts": prompts}))
"""


def measure(mode: str, args: argparse.Namespace) -> dict:
    shape = [str(v) for v in (args.questions, args.branch, args.depth, args.max_tokens)]
    command = [sys.executable, "-c", CASE, mode, *shape, args.cache]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def agreement(off: dict, on: dict) -> dict:
    """Rows of the same prompt whose sampled tokens differ, the first token where one parts (row,
    position, the two log-probabilities there), the largest log-probability difference before
    a row parts, and the rows whose prompts differ: a parted row's children hold its text."""
    differing, first, drift = 0, None, 0.0
    same_prompt = [row for row, (a, b) in enumerate(zip(off["prompts"], on["prompts"])) if a == b]
    for row in same_prompt:
        a, b = off["tokens"][row], on["tokens"][row]
        same = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        pairs = zip(off["logprobs"][row][:same], on["logprobs"][row][:same])
        drift = max([drift, *(abs(x - y) for x, y in pairs)])
        if a != b:
            differing += 1
            if first is None and same < min(len(a), len(b)):
                first = f"row {row} token {same}: {off['logprobs'][row][same]:.4f} / {on['logprobs'][row][same]:.4f}"
    return {
        "rows_differing": differing,
        "first_difference": first or "",
        "max_logprob_diff": drift,
        "rows_other_prompt": len(off["prompts"]) - len(same_prompt),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=2, help="trees, each one root prompt")
    parser.add_argument("--branch", type=int, default=3, help="children per node")
    parser.add_argument("--depth", type=int, default=3, help="engine calls, one per depth")
    parser.add_argument("--max-tokens", type=int, default=24, help="sampled tokens per node")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "ragfactory" / "bench-models"))
    args = parser.parse_args()
    off, on = measure("off", args), measure("on", args)
    rows = []
    for mode, run in (("off", off), ("on", on)):
        rows.append(
            {
                "prefix_reuse": mode,
                "rows": len(run["tokens"]),
                "wall_s": round(run["wall_s"], 1),
                "cpu_s": round(run["cpu_s"], 1),
                "prompt_tokens": run["prompt_tokens"],
                "computed_tokens": run["computed_tokens"],
                "computed_ratio": round(run["computed_tokens"] / run["prompt_tokens"], 3),
                "peak_rss_mb": round(run["peak_rss_mb"]),
            }
        )
    rows[1].update(agreement(off, on))
    rows[1]["wall_ratio_off_on"] = round(off["wall_s"] / on["wall_s"], 2)
    report("prefix_reuse", rows)


if __name__ == "__main__":
    main()
