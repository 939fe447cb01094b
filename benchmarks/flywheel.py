"""Nights of the flywheel on this machine with the embedded model (docs/flywheel.md): each night's
questions, exported rows, training loss, valid delta with its interval and decision, and the test
figure of the model promoted at the end against the base model's.

The nights are the deployed ``nightly`` pipeline's (``prefect.yaml``: DecEx and MCTS on the next
frontier train questions, SFT then DPO on this night's exports and the two nights before, the
candidate against the incumbent on valid, F1 in agentic mode, promotion only when the bootstrap
95 % interval of the delta lies above zero), run one after the other through the ``nightly`` flow
in a warehouse of their own. The flags scale the budgets down so that nights fit a 2-core machine;
the defaults are the deployment's. The evaluation is not tuned: whatever the figures show is the
result. SmolLM2-135M scores near zero EM on HotpotQA, so the deltas say how little a few steps of
a small model move F1, not what the papers' 1–8B models gain.

Run: .venv/bin/python benchmarks/flywheel.py [--nights 3] [--questions 32] [--steps 20]
     [--eval-limit 50] [--root DIR]

The world's flywheel (configs/world-nightly.yaml; docs/world.md), from a folder holding `world/`:
     ragfactory world --seed 0 --questions 800 --passages 3000 --rungs lookup world/
     python benchmarks/flywheel.py --config configs/world-nightly.yaml

When the nights promoted a model, the last table pairs it with the base on test (the deciding
metric's delta and its bootstrap 95 % interval); ``--nights 0 --root DIR`` reports that for the
nights a root holds already.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import report  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def nightly_parameters(root: str, args: argparse.Namespace) -> dict:
    """The nightly config (``--config``, else the ``nightly`` deployment's), in ``root``, with the
    budgets the flags give."""
    from ragfactory.flows.config import NightlyConfig

    if args.config:
        config = yaml.safe_load(Path(args.config).read_text())
    else:
        spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
        [deployment] = [d for d in spec["deployments"] if d["name"] == "nightly"]
        config = copy.deepcopy(deployment["parameters"]["config"])
    config["build"]["warehouse"] = {"root": root}
    if args.questions is not None:
        config["build"]["search"]["questions_per_night"] = args.questions
    if args.steps is not None:
        trl = config.get("trl", {})
        methods = config.get("methods") or NightlyConfig.model_fields["methods"].get_default(call_default_factory=True)
        config["trl"] = {m: {**trl.get(m, {}), "max_steps": args.steps} for m in methods}
    if args.eval_limit is not None:
        config.setdefault("evaluation", {})["limit"] = args.eval_limit
    return config


def night_row(root: str, config, result: dict, wall_s: float) -> dict:
    """One night: what it built, trained and decided, and its promoted model's test F1."""
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    wh, run_id = Warehouse(root), result["build"]["run_id"]
    built = query(
        wh, "select strategy, count(distinct question_id) as n from nodes where run_id = $r group by 1", {"r": run_id}
    ).to_pylist()
    exported = {
        t: query(wh, f"select count(*) from {t} where run_id = $r", {"r": run_id}).column(0)[0].as_py()
        for t in ("sft_examples", "preference_pairs")
    }
    losses = {t["method"]: round(float(t["metrics"].get("train_loss", float("nan"))), 3) for t in result["trained"]}
    d = result["decision"]
    return {
        "night": result["night"],
        "questions": " ".join(f"{r['strategy']}:{r['n']}" for r in built),
        "sft_rows": exported["sft_examples"],
        "dpo_pairs": exported["preference_pairs"],
        "sft_loss": losses.get("sft"),
        "dpo_loss": losses.get("dpo"),
        "n_valid": d.get("n"),
        f"delta_{config.metric}": d.get("delta"),
        "ci_low": d.get("ci_low"),
        "ci_high": d.get("ci_high"),
        "p": d.get("p"),
        "decision": d["decision"],
        "reason": d.get("reason"),
        "promoted": d["promoted"],
        f"test_{config.metric}": test_score(root, config, result["test"]["run_id"]),
        "wall_s": round(wall_s),
    }


def test_score(root: str, config, eval_run_id: str) -> float:
    """The mean of the deciding metric in the deciding mode over an evaluation's questions."""
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    sql = f"select avg({config.metric}) from evals where run_id = $r and mode = $m"
    mean = query(Warehouse(root), sql, {"r": eval_run_id, "m": config.mode}).column(0)[0].as_py()
    return round(mean or 0.0, 4)


def main(args: argparse.Namespace) -> None:
    # As a command runs its flows: Prefect's settings made first (a temporary server with its own
    # home, no telemetry), and an interrupt marks the night's runs and leaves no process behind.
    from ragfactory.cli.common import prefect_local_defaults, run_flow

    cleanup = prefect_local_defaults()
    from ragfactory.flows.config import NightlyConfig
    from ragfactory.flows.nightly import nightly
    from ragfactory.tasks.training.registry import promoted_model
    from ragfactory.warehouse.store import Warehouse

    root = args.root or tempfile.mkdtemp(prefix="flywheel-")
    config = NightlyConfig.model_validate(nightly_parameters(root, args))
    rows = []
    for i in range(1, args.nights + 1):
        start = time.perf_counter()
        result = run_flow(lambda night=f"night-{i}": nightly(config, night=night, return_state=True), cleanup)
        rows.append(night_row(root, config, result, time.perf_counter() - start))
        print(rows[-1], flush=True)
    base = config.base_model
    promoted = promoted_model(Warehouse(root), config.name) or base  # --nights 0 reports a root's nights so far
    if promoted != base:  # the base on the same test questions, for the comparison
        runs = run_flow(lambda: on_test(root, config, [promoted, base])(return_state=True), cleanup)
        rows.append({"night": "base", "promoted": base, f"test_{config.metric}": test_score(root, config, runs[base])})
        report("flywheel_test", [test_comparison(root, config, runs[promoted], runs[base])])
    print(f"warehouse: {root}")
    report("flywheel", rows)


def on_test(root: str, config, models: list[str]):
    """A flow that evaluates ``models`` on test as the nights do (a completed evaluation is read
    back) and returns each one's evaluation run id."""
    from prefect import flow

    from ragfactory.flows.nightly import evaluated
    from ragfactory.warehouse.store import Warehouse

    @flow(name="flywheel-test", log_prints=True)
    def evaluate_on_test() -> dict:
        return {m: evaluated(Warehouse(root), config, m, "test")["run_id"] for m in models}

    return evaluate_on_test


def test_comparison(root: str, config, promoted_run: str, base_run: str) -> dict:
    """The promoted model's test evaluation against the base's, on the questions both answered in
    the deciding mode: the paired delta of the deciding metric (EM for cover EM, which the
    comparison does not pair) and its bootstrap 95 % interval, as ``eval_compare`` computes them
    (``tasks/eval/compare.py``)."""
    from ragfactory.tasks.eval.compare import CompareConfig, compare_rows
    from ragfactory.tasks.llm.cache import utc_now
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    sql = "select * from evals where run_id = $r and mode = $mode"
    rows = [query(Warehouse(root), sql, {"r": r, "mode": config.mode}).to_pylist() for r in (promoted_run, base_run)]
    [c] = compare_rows(*rows, CompareConfig(), utc_now())
    m = config.metric if config.metric in ("em", "f1") else "em"
    return {"promoted": c["model_a"], "base": c["model_b"], "n": c["n"], f"{m}_promoted": c[f"{m}_a"], f"{m}_base": c[f"{m}_b"],
            f"{m}_delta": c[f"{m}_delta"], "low": c[f"{m}_delta_low"], "high": c[f"{m}_delta_high"]}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=3)
    parser.add_argument("--config", help="a nightly config (default: prefect.yaml's nightly deployment's)")
    parser.add_argument(
        "--questions", type=int, help="new train questions per strategy per night (default: the config's)"
    )
    parser.add_argument("--steps", type=int, help="optimizer steps of each training method (default: the config's)")
    parser.add_argument(
        "--eval-limit", type=int, help="valid (and test) questions per evaluation (default: the config's)"
    )
    parser.add_argument("--root", help="the warehouse (default: a new temporary folder)")
    main(parser.parse_args())
