"""A paired evaluation that fits a night: a trained model and its base on 200 world test questions.

The world (docs/world.md, seed 0) has exactly ``--questions`` test questions, a quarter of each
rung (lookups, bridges, comparisons, chains), over a 3,000-passage corpus searched with BM25. The
trained model is the embedded SmolLM2-135M after ``--steps`` SFT steps on R3 trajectories the
world's teacher wrote for 16 train questions: a real second checkpoint, so nothing is answered
from the first model's call cache. Then, each a ``ragfactory`` process timed by ``os.wait4``:

- **rate per mode**: the base alone on ``--rate-questions`` questions in each mode: questions
  per minute, and the same for the engine as it was before its CPU work (``OLD_OPTIONS`` of
  ``benchmarks/night.py``) unless ``--no-old``;
- **paired**: ``evaluate --model TRAINED --compare embedded --mode agentic --mode rag --limit N``:
  both models, both modes, every question, with the paired comparison (``eval_compare``).

Each timed evaluation runs in a copy of the warehouse of its own, so none is answered from
another's call cache.

The budget is the world's: its deepest question (a three-hop chain) needs three retrievals, each a
Reasoning and a Grounding round of ReasonRAG's loop, and one round to answer: ``--max-rounds 7``;
a round is a sentence or two and one tag, ``--max-tokens 128``. The papers' 11 rounds of 256 tokens
are for open-domain questions of up to five hops.

Run: .venv/bin/python benchmarks/evaluation.py [--questions 200] [--rate-questions 20] [--no-old]
Writes benchmarks/results/evaluation.json (and evaluation_stages.json).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, timed_command  # noqa: E402
from night import OLD_OPTIONS  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "ragfactory")
R3 = {"n_attempts": 4, "min_queries": 1, "judge_outcome": False, "judge_relevance": False, "metric": "em"}
MODES = ("agentic", "rag")


def stage(out: Path, stages: dict, name: str, args: list[str]) -> dict:
    """One ``ragfactory`` command, timed into ``stages[name]``."""
    stages[name] = timed_command([CLI, *args], out / f"{name.replace(' ', '_')}.log", cwd=REPO)
    return stages[name]


def sql(root: Path, query: str) -> list[dict]:
    command = [CLI, "sql", query, "--root", str(root), "--format", "json"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def trained_model(out: Path, stages: dict, steps: int) -> str:
    """The embedded model after ``steps`` SFT steps on the world teacher's R3 trajectories."""
    config = yaml.safe_load((out / "world" / "build.yaml").read_text())
    config |= {
        "name": "evaluation-bench",
        "llm": {"policy": {"backend": "world:r3-teacher", "options": {"world": str(out / "world")}}},
        "search": {"strategies": ["r3"], "questions_per_dataset": 16, "shard_size": 16, "r3": R3},
        "export": {"decontamination": {"mode": "drop", "against": ["valid", "test"]}},
    }
    (out / "build.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    stage(out, stages, "teacher build", ["build", "--config", str(out / "build.yaml"), "--root", str(out / "wh")])
    run_id = sql(out / "wh", "select run_id from runs where flow = 'build'")[0]["run_id"]
    trl = ["--trl", f"max_steps={steps}", "--trl", "per_device_train_batch_size=2"]
    stage(out, stages, "sft", ["train", "--method", "sft", "--run-id", run_id, *trl, "--name", "bench", "--root", str(out / "wh")])  # fmt: skip
    return sql(out / "wh", "select model_id from models order by created_at desc limit 1")[0]["model_id"]


def fresh_warehouse(out: Path, name: str) -> Path:
    """A copy of the benchmark's warehouse for one timed evaluation, its models folder linked: call
    ids do not depend on engine settings, so evaluations sharing a call cache would answer each
    other's calls instead of computing them."""
    root = out / f"wh-{name.replace(' ', '-')}"
    shutil.copytree(out / "wh", root, ignore=lambda folder, names: ["models"] if folder.endswith("artifacts") else [])
    (root / "artifacts" / "models").symlink_to(out / "wh" / "artifacts" / "models")
    return root


def evaluate_args(root: Path, args: argparse.Namespace, limit: int, modes, options: dict | None = None) -> list[str]:
    command = ["evaluate", "--dataset", "world", "--source", "corpus", "--limit", str(limit), "--root", str(root)]
    command += ["--max-rounds", str(args.max_rounds), "--max-tokens", str(args.max_tokens)]
    command += [part for mode in modes for part in ("--mode", mode)]
    return command + [part for k, v in (options or {}).items() for part in ("--engine-option", f"{k}={str(v).lower()}")]


def main(args: argparse.Namespace) -> None:
    out = Path(args.out or tempfile.mkdtemp(prefix="evaluation-"))
    out.mkdir(parents=True, exist_ok=True)
    stages: dict = {}
    stage(out, stages, "world", ["world", "--seed", "0", "--questions", str(args.questions * 4), "--passages", "3000", str(out / "world")])  # fmt: skip
    model = trained_model(out, stages, args.steps)
    rows = []
    engines = {"new": None} | ({} if args.no_old else {"old": OLD_OPTIONS})
    for engine, options in engines.items():
        for mode in MODES:
            name = f"rate {mode} {engine}"
            root = fresh_warehouse(out, name)
            figures = stage(out, stages, name, evaluate_args(root, args, args.rate_questions, [mode], options))
            rows.append({"what": f"{mode}, base, engine {engine}", "questions": args.rate_questions,
                         "questions_per_min": round(args.rate_questions / figures["wall_s"] * 60, 2), **figures})  # fmt: skip
    paired_root = fresh_warehouse(out, "paired")
    paired = evaluate_args(paired_root, args, args.questions, MODES) + ["--model", model, "--compare", "embedded"]
    figures = stage(out, stages, "paired", paired)
    answered = 2 * len(MODES) * args.questions
    rows.append({"what": "paired: trained and base, agentic + rag", "questions": args.questions,
                 "questions_per_min": round(answered / figures["wall_s"] * 60, 2), **figures})  # fmt: skip
    report("evaluation", rows)
    report("evaluation_stages", [{"stage": k, **v} for k, v in stages.items()])
    for row in sql(paired_root, "select mode, n, em_a, em_b, em_delta, em_delta_low, em_delta_high from eval_compare"):
        print(row)
    print(f"runs under {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=200, help="world test questions of the paired evaluation")
    parser.add_argument("--rate-questions", type=int, default=20, help="questions of each mode's rate")
    parser.add_argument("--max-rounds", type=int, default=7)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=1, help="SFT steps of the trained model")
    parser.add_argument("--no-old", action="store_true", help="skip the old engine's rates")
    parser.add_argument("--out", default=None)
    main(parser.parse_args())
