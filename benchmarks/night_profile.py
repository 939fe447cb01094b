"""A profile of a CPU night: where a build's CPU goes, by phase, against the engine's own limit.

The build (``ragfactory build --config``, the demo by default, into a fresh warehouse root) runs
under py-spy (``record --format raw --subprocesses --nonblocking --full-filenames``: every Python
thread of the build and of the processes it starts, Prefect's server among them, idle threads left
out), and each sampled stack goes to one phase: the innermost frame that a rule of ``RULES``
matches decides. Prefill is ``tasks/llm/prefill.py`` (and the prefix store beside it), decode the
model steps after it (``tasks/llm/running_batch.py``, the row bookkeeping in the backend's
``_advance`` included), grammar masks ``tasks/llm/structured.py`` and llguidance, sampling
``tasks/llm/sampling.py``, tokenisation the tokenizer and chat template (an engine's prompts and
texts, stop-string checks), then the strategies' Python (``tasks/search/``), retrieval
(``tasks/retrieval/``), warehouse writes (``warehouse/``, pyarrow, duckdb), Prefect, the model's
load, and other.

A sample stands for one Python thread's time, not for CPU: the model's forward passes also run on
torch's OpenMP workers, which py-spy does not see, and py-spy cannot split kernel time from user
time. So the build's user CPU seconds (from ``getrusage`` of its process tree) are shared among
the phases by their samples, and its system seconds make a phase of their own, "allocator / page
faults", beside its minor page faults: a phase's seconds are therefore an estimate, its sample
count the measurement. The forward passes' share is if anything understated (their workers'
time is spread over every phase).

Then the engine's standalone limit: the same backend (``TransformersBackend`` on the embedded
model, default settings as a build makes them, or ``--engine-options``) in a process of its own,
batches of ``--rows`` distinct prompts of about ``--prompt-tokens`` tokens, one call with one new
token (prefill) and one with ``--new-tokens`` (prefill and decode; decode = the difference), CPU
seconds from ``getrusage``. The build's efficiency is the CPU seconds its engine tokens would take
at those rates, over the CPU seconds the build took: the share of the night that bought model
tokens at the engine's best. Its tokens: the prompt tokens prefill computed (the shards' engine
lines in its log; a prompt several rows share is prefilled once), else the prompt tokens of the
``llm_calls`` table, and that table's completion tokens. Per phase too: prefill and decode tokens
per CPU second of their phase, over the standalone rate.

``--evaluate "ARGS"`` profiles ``ragfactory evaluate ARGS`` on the same warehouse after the build.
On a machine shared with other work every second is inflated by the neighbours (the load average
before and after is printed); the shares and the efficiency are the figures to compare.

    .venv/bin/python benchmarks/night_profile.py [--config configs/demo.yaml] [--rate 20]
        [--rows 8 32] [--new-tokens 64] [--engine-options '{"kv_buffers": false}']
        [--evaluate "--dataset hotpotqa --limit 5"] [--out DIR [--reuse]]

Writes benchmarks/results/night_profile*.json (one per table) and, under --out, each run's py-spy
stacks, log and usage, the standalone rates and night_profile.json with all of it; ``--reuse``
reads back what a run left there and measures only what is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv" / "bin"
BACKEND = "tasks/llm/transformers_backend.py"
SYSTEM = "allocator / page faults"
OTHER = "other"
PROCESS = "<process>"  # the file of a process label's frame: a sample of Prefect's server is Prefect's


# (phase, path fragments of its files, functions of the transformers backend), in precedence order
# for one frame; a stack goes to the phase of its innermost frame that one matches.
RULES = [
    ("model load", ("tasks/llm/embedded.py",), ("load",)),
    ("tokenisation", ("/tokenization_", "/tokenizers/"), ("encode_prompt", "_tail_has_stop", "_completion")),
    (
        "grammar masks",
        ("tasks/llm/structured.py", "tasks/llm/grammar.py", "/llguidance/"),
        ("_mask", "_start_matchers"),
    ),
    ("sampling", ("tasks/llm/sampling.py",), ()),
    ("prefill", ("tasks/llm/prefill", "tasks/llm/prefix"), ()),
    ("decode", ("tasks/llm/running_batch",), ("_decode", "_advance")),
    ("strategy Python", ("tasks/search/",), ()),
    ("retrieval", ("tasks/retrieval/",), ()),
    ("warehouse", ("/warehouse/", "/pyarrow/", "/duckdb/"), ()),
    ("Prefect", ("/prefect/",), ()),
]
PHASES = [phase for phase, _, _ in RULES] + [OTHER]
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def parse_raw(text: str) -> list[tuple[list[tuple[str, str]], int]]:
    """py-spy's raw (collapsed) stacks: each line's frames, outermost first, as (function, file),
    and its sample count. The process label ``--subprocesses`` puts first becomes a frame
    (its command line, ``PROCESS``)."""
    stacks = []
    for line in text.splitlines():
        body, _, count = line.rpartition(" ")
        if not body or not count.isdigit():
            continue
        frames = []
        for part in body.split(";"):
            match = FRAME.match(part)
            if part.startswith("process ") and not match:
                frames.append((part.split(":", 1)[-1], PROCESS))
            elif match:
                frames.append((match["func"], match["file"]))
        stacks.append((frames, int(count)))
    return stacks


def classify(frames: list[tuple[str, str]]) -> str:
    """The phase of one stack: the first rule that matches, scanning from the innermost frame."""
    for func, file in reversed(frames):
        if file == PROCESS:  # the process label: all of Prefect's server is Prefect's
            return "Prefect" if "prefect" in func else OTHER
        method = func.rsplit(".", 1)[-1]  # py-spy names a method Class.method
        for phase, parts, backend in RULES:
            if any(part in file for part in parts) or (method in backend and file.endswith(BACKEND)):
                return phase
    return OTHER


def tally(stacks) -> tuple[Counter, Counter]:
    """Samples per phase, and samples per innermost function (``function (file)``, its self time)."""
    phases, functions = Counter(), Counter()
    for frames, count in stacks:
        phases[classify(frames)] += count
        if frames:
            func, file = frames[-1]
            functions[f"{func} ({_short(file)})"] += count
    return phases, functions


def _short(file: str) -> str:
    for marker in ("site-packages/", f"{REPO}/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return re.sub(r"^.*/lib/python3\.\d+/", "", file)  # the standard library's modules by name


def phase_rows(phases: Counter, usage: dict, rate: int) -> list[dict]:
    """One row per phase: samples, share of the build's CPU, CPU seconds (user shared by samples,
    system as a phase of its own)."""
    total = sum(phases.values()) or 1
    cpu = usage["user_s"] + usage["system_s"]
    rows = []
    for phase in PHASES:
        seconds = usage["user_s"] * phases[phase] / total
        rows.append(
            {
                "phase": phase,
                "samples": phases[phase],
                "sampled_s": round(phases[phase] / rate, 1),
                "cpu_share": round(seconds / cpu, 3),
                "cpu_s": round(seconds, 1),
            }
        )
    rows.append(
        {
            "phase": SYSTEM,
            "samples": None,
            "sampled_s": None,
            "cpu_share": round(usage["system_s"] / cpu, 3),
            "cpu_s": round(usage["system_s"], 1),
        }
    )
    return rows


# Runs the profiled command as its child and writes the child's rusage: py-spy's own CPU is not in it.
WRAPPER = """
import json, resource, subprocess, sys, time
wall = time.perf_counter()
code = subprocess.call(sys.argv[2:])
u = resource.getrusage(resource.RUSAGE_CHILDREN)
json.dump({"returncode": code, "wall_s": time.perf_counter() - wall, "user_s": u.ru_utime, "system_s": u.ru_stime,
           "minor_faults": u.ru_minflt, "major_faults": u.ru_majflt, "peak_rss_mb": u.ru_maxrss / 1024},
          open(sys.argv[1], "w"))
"""


def profile(command: list[str], args, name: str, root: Path) -> tuple[Counter, Counter, dict]:
    """Run one command under py-spy; its usage (rusage, load average, engine tokens) is saved beside
    its stacks, and with ``--reuse`` a saved run is read back instead of run again."""
    raw, usage_file, log = (args.out / f"{name}.{kind}" for kind in ("stacks.txt", "usage.json", "log"))
    if not (args.reuse and raw.exists() and usage_file.exists()):
        spy = [str(VENV / "py-spy"), "record", "--format", "raw", "--rate", str(args.rate), "--subprocesses"]
        spy += ["--nonblocking", "--full-filenames", "-o", str(raw), "--"]
        load_before, tokens_before = os.getloadavg()[0], engine_tokens(root) if name != "build" else None
        print(f"profiling {name}: {shlex.join(command)} (its log: {log})", flush=True)
        with log.open("w") as sink:
            subprocess.run([*spy, sys.executable, "-c", WRAPPER, str(usage_file), *command], stdout=sink, stderr=sink)
        usage = json.loads(usage_file.read_text())
        if usage["returncode"] != 0:
            raise SystemExit(f"{name} exited {usage['returncode']}: see {log}")
        tokens = engine_tokens(root)
        if tokens_before:  # the engine tokens of this run only
            tokens = {key: tokens[key] - tokens_before[key] for key in tokens}
        tokens["prefilled"] = prefilled_tokens(log.read_text(errors="replace"))
        usage.update(rate=args.rate, load=[load_before, os.getloadavg()[0]], tokens=tokens)
        usage_file.write_text(json.dumps(usage, indent=2))
    usage = json.loads(usage_file.read_text())
    phases, functions = tally(parse_raw(raw.read_text()))
    return phases, functions, usage


PREFILLED = re.compile(r"'prefilled_tokens': (\d+)")


def prefilled_tokens(log: str) -> int | None:
    """The prompt tokens prefill computed, summed over the shards' engine lines of a build's log
    (a prompt that several rows share is prefilled once); None where no line counts them."""
    counts = [int(n) for n in PREFILLED.findall(log)]
    return sum(counts) if counts else None


def engine_tokens(root: Path) -> dict:
    query = (
        "select sum(prompt_tokens) as prompt, sum(completion_tokens) as completion, count(*) as calls from llm_calls"
    )
    out = subprocess.run(
        [str(VENV / "ragfactory"), "sql", query, "--root", str(root), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    row = json.loads(out)
    row = row[0] if isinstance(row, list) else row
    return {key: int(row[key] or 0) for key in ("prompt", "completion", "calls")}


STANDALONE = """
import json, resource, sys, time
from ragfactory.tasks.llm.embedded import resolve_model
from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
from ragfactory.tasks.llm.types import Request
prompt_tokens, new_tokens, cache, options = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
sizes = map(int, sys.argv[5:])
engine = TransformersBackend(resolve_model("embedded", cache), TransformersSettings(device="cpu", **options))
engine.load()
def requests(rows, max_tokens, salt):
    words = " ".join(f"fact {k} says item {k} weighs {k * 7} grams." for k in range(prompt_tokens // 14))
    return [Request.chat([{"role": "user", "content": f"Case {salt}-{r}. " + words}], max_tokens=max_tokens,
                         temperature=0.8, seed=r) for r in range(rows)]
def timed(batch):
    before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    answers = engine.generate_batch(batch)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    done = [a[0] for a in answers]
    return cpu, time.perf_counter() - wall, sum(c.prompt_tokens for c in done), sum(c.completion_tokens for c in done)
timed(requests(2, 2, "warm"))
for rows in sizes:
    cpu1, wall1, prompt, _ = timed(requests(rows, 1, "a"))
    cpu2, wall2, _, completion = timed(requests(rows, new_tokens, "b"))
    decoded = completion - rows
    print(json.dumps({"rows": rows, "prompt_tokens": prompt // rows, "prefill_tok_per_cpu_s": prompt / cpu1,
                      "prefill_tok_per_s": prompt / wall1, "decode_tokens": decoded,
                      "decode_tok_per_cpu_s": decoded / max(cpu2 - cpu1, 1e-9),
                      "decode_tok_per_s": decoded / max(wall2 - wall1, 1e-9)}))
"""


def standalone(args: argparse.Namespace) -> list[dict]:
    sizes = [str(n) for n in args.rows]
    shape = [str(args.prompt_tokens), str(args.new_tokens), args.cache, args.engine_options]
    command = [sys.executable, "-c", STANDALONE, *shape, *sizes]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def efficiency(tokens: dict, rows: list[dict], usage: dict, limit: dict) -> dict:
    """The build's engine tokens (prefilled where its log counts them, else prompt tokens, and
    completion tokens) against the standalone rates of one batch size."""
    seconds = {row["phase"]: row["cpu_s"] for row in rows}
    cpu = usage["user_s"] + usage["system_s"]
    prefilled = tokens.get("prefilled") or tokens["prompt"]
    needed = prefilled / limit["prefill_tok_per_cpu_s"] + tokens["completion"] / limit["decode_tok_per_cpu_s"]
    prefill_rate = prefilled / max(seconds["prefill"], 1e-9)
    decode_rate = tokens["completion"] / max(seconds["decode"], 1e-9)
    return {
        "rows": limit["rows"],
        "standalone_cpu_s": round(needed, 1),
        "build_cpu_s": round(cpu, 1),
        "efficiency": round(needed / cpu, 3),
        "prefill_tok_per_cpu_s": round(prefill_rate, 1),
        "prefill_efficiency": round(prefill_rate / limit["prefill_tok_per_cpu_s"], 3),
        "decode_tok_per_cpu_s": round(decode_rate, 1),
        "decode_efficiency": round(decode_rate / limit["decode_tok_per_cpu_s"], 3),
    }


def summary(name: str, usage: dict, tokens: dict, load: tuple[float, float]) -> dict:
    cpu = usage["user_s"] + usage["system_s"]
    return {
        "run": name,
        "wall_s": round(usage["wall_s"], 1),
        "user_s": round(usage["user_s"], 1),
        "system_s": round(usage["system_s"], 1),
        "system_share": round(usage["system_s"] / cpu, 3),
        "minor_faults": usage["minor_faults"],
        "peak_rss_mb": round(usage["peak_rss_mb"]),
        "llm_calls": tokens["calls"],
        "prompt_tokens": tokens["prompt"],
        "prefilled_tokens": tokens.get("prefilled"),
        "completion_tokens": tokens["completion"],
        "load_before": load[0],
        "load_after": load[1],
    }


def run_profile(name: str, command: list[str], args, root: Path) -> dict:
    phases, functions, usage = profile(command, args, name, root)
    rows = phase_rows(phases, usage, usage["rate"])
    top = [
        {"function": f, "self_samples": n, "share": round(n / max(sum(functions.values()), 1), 3)}
        for f, n in functions.most_common(5)
    ]
    report(f"night_profile_{name}_phases", rows)
    report(f"night_profile_{name}_top", top)
    tokens = usage["tokens"]
    return {
        "phases": rows,
        "top_functions": top,
        "usage": usage,
        "tokens": tokens,
        "summary": summary(name, usage, tokens, tuple(usage["load"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--rate", type=int, default=20, help="py-spy samples per second")
    parser.add_argument("--evaluate", default=None, help="also profile `ragfactory evaluate` with these arguments")
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 32], help="standalone batch sizes")
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--engine-options", default="{}", help='TransformersSettings, as JSON: {"kv_buffers": false}')
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "ragfactory" / "bench-models"))
    parser.add_argument("--out", type=Path, default=None, help="folder for the stacks and JSON (default: a temp one)")
    parser.add_argument("--reuse", action="store_true", help="read back the runs saved under --out, profile the rest")
    args = parser.parse_args()
    args.out = args.out or Path(tempfile.mkdtemp(prefix="night_profile_"))
    args.out.mkdir(parents=True, exist_ok=True)
    root = args.out / "warehouse"
    results = {"config": args.config, "rate": args.rate, "cores": os.cpu_count()}
    build = [str(VENV / "ragfactory"), "build", "--config", args.config, "--root", str(root)]
    runs = {"build": run_profile("build", build, args, root)}
    if args.evaluate:
        evaluate = [str(VENV / "ragfactory"), "evaluate", "--root", str(root), *shlex.split(args.evaluate)]
        runs["evaluate"] = run_profile("evaluate", evaluate, args, root)
    saved = args.out / "standalone.json"
    limits = json.loads(saved.read_text()) if args.reuse and saved.exists() else standalone(args)
    saved.write_text(json.dumps(limits, indent=2))
    report("night_profile_standalone", limits)
    build_run = runs["build"]
    effs = [efficiency(build_run["tokens"], build_run["phases"], build_run["usage"], limit) for limit in limits]
    report("night_profile_efficiency", effs)
    report("night_profile", [run["summary"] for run in runs.values()])
    results.update(runs=runs, standalone=limits, efficiency=effs, load_end=os.getloadavg()[0])
    (args.out / "night_profile.json").write_text(json.dumps(results, indent=2))
    print(f"stacks and JSON: {args.out}")


if __name__ == "__main__":
    main()
