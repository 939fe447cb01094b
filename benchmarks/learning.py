"""Does a model learn from the factory's data? Built, trained and evaluated on a seeded world.

The world (docs/world.md) has entity-disjoint splits: no entity of a test question appears in a
train question, so a trained model that answers more test questions learned to search and read,
not the facts. For each method the exports feed, this builds on world train questions, trains the
embedded model (SmolLM2-135M) on the export, and evaluates base and trained on the same test
questions, with the paired bootstrap 95 % interval of the EM delta (``tasks/eval/compare.py``).
Beside each method a **control** trains the same way on scrambled labels; the gain must come
from the labels, so a control must show none.

Methods measured:

- ``r3-sft``: R3's cold start (R3-RAG §3.2) with the world's teacher engine as its larger model
  (``tasks/search/r3/teacher.py``), best-of-N by EM, SFT on the kept trajectories, evaluated in
  the ``r3`` mode (R3's step loop, the inference the data trains). Controls: SFT on one pruned
  trajectory a question (the same queries, a wrong final answer: ``--control pruned``), or on the
  kept steps each given another question's completion (``--control scrambled``).

Every stage runs as a user runs it (``ragfactory world``, ``build``, ``train``, ``evaluate``), in
a warehouse of its own; the CPU seconds and the peak resident memory of each are the children's
as the kernel counts them.

Run: .venv/bin/python benchmarks/learning.py [--train 200] [--test 200] [--steps 12] [--rungs lookup] [--root DIR]

A ``--root`` given again resumes: its world, its completed build and its models of the same name
are reused (so another control can be trained beside an earlier run's kept model).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import report  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "ragfactory.cli"]
R3 = {"n_attempts": 4, "min_queries": 1, "judge_outcome": False, "judge_relevance": False, "metric": "em"}


def run(args: list[str], stages: dict, name: str) -> str:
    """One command of the pipeline; its output, and its wall and CPU seconds in ``stages``."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run([*CLI, *args], capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    stages[name] = {"wall_s": round(time.perf_counter() - start, 1), "cpu_min": round(cpu / 60, 2)}
    return done.stdout


def build(root: Path, world: Path, train: int, stages: dict) -> str:
    """R3 with the world teacher on ``train`` world train questions; returns the run id (the
    warehouse's build run when ``root`` has one already)."""
    if (done := _build_run(root)) is not None:
        return done
    config = yaml.safe_load((world / "build.yaml").read_text())
    config |= {
        "name": "learning",
        "llm": {"policy": {"backend": "world:r3-teacher", "options": {"world": str(world)}}},
        "search": {"strategies": ["r3"], "questions_per_dataset": train, "shard_size": 50, "r3": R3},
        "export": {"decontamination": {"mode": "drop", "against": ["valid", "test"]}},
    }
    path = root / "build.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    run(["build", "--config", str(path), "--root", str(root / "wh")], stages, "build")
    return _build_run(root)


def _build_run(root: Path) -> str | None:
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    if not (root / "wh").is_dir():
        return None
    sql = "select run_id from runs where flow = 'build' and status = 'completed'"
    ids = query(Warehouse(root / "wh"), sql).column(0).to_pylist()
    return ids[0] if ids else None


def pruned_rows(root: Path, run_id: str) -> Path:
    """The control's SFT rows: one pruned attempt a question whose final answer is wrong (the same
    queries as a kept one), written as the exporter writes kept ones, into a parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ragfactory.tasks.rewards.answer import exact_match
    from ragfactory.tasks.search.r3.exports import r3_sft_examples
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(root / "wh")
    nodes = query(wh, "select * from nodes where run_id = $r", {"r": run_id}).to_pylist()
    questions = query(wh, "select question_id, question, golden_answers from questions").to_pylist()
    gold = {q["question_id"]: q["golden_answers"] for q in questions}
    for node in nodes:
        node["parsed"] = json.loads(node["parsed"]) if isinstance(node["parsed"], str) else node["parsed"]
    wrong = {}  # question -> its first attempt whose final answer is wrong
    for node in sorted(nodes, key=lambda n: n["path"]):
        if node["kind"] == "answer" and not exact_match(node["parsed"].get("content"), gold[node["question_id"]]):
            wrong.setdefault(node["question_id"], node["parsed"]["attempt"])
    for node in nodes:
        if node["kind"] != "question":
            node["is_selected"] = node["parsed"].get("attempt") == wrong.get(node["question_id"], -1)
    rows = r3_sft_examples(nodes, questions)
    path = root / "control.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def evaluate(root: Path, model: str, test: int, stages: dict, name: str) -> dict:
    """``model`` against the embedded base on ``test`` world test questions in the r3 mode."""
    args = ["evaluate", "--model", model, "--compare", "embedded", "--dataset", "world", "--mode", "r3"]
    args += ["--limit", str(test), "--max-rounds", "5", "--max-tokens", "96", "--source", "corpus"]
    args += ["--engine-option", "kv_cache_mb=1024"]  # a decode chunk holds ~20 R3 prompts, not ~5
    run([*args, "--root", str(root / "wh")], stages, name)
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    sql = "select * from eval_compare where model_a = $m order by created_at desc limit 1"
    return query(Warehouse(root / "wh"), sql, {"m": model}).to_pylist()[0]


def scrambled_rows(root: Path, run_id: str) -> Path:
    """The scrambled control's SFT rows: every kept step's prompt with the completion another
    question wrote at the same step (questions of as many steps, rotated by one), so no label
    says anything about its own question."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    sql = "select * from sft_examples where run_id = $r order by question_id, len(node_ids)"
    rows = query(Warehouse(root / "wh"), sql, {"r": run_id}).to_pylist()
    by_question: dict[str, list[dict]] = {}
    for row in rows:
        by_question.setdefault(row["question_id"], []).append(row)
    by_length: dict[int, list[list[dict]]] = {}
    for steps in by_question.values():
        by_length.setdefault(len(steps), []).append(steps)
    for group in by_length.values():
        answers = [[step["messages"][-1]["content"] for step in steps] for steps in group]
        for i, steps in enumerate(group):
            for step, content in zip(steps, answers[(i + 1) % len(group)]):
                step["messages"][-1] = {"role": "assistant", "content": content}
    path = root / "control.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def table_row(label: str, c: dict) -> dict:
    """A line of the learning table from a comparison (model a against model b)."""
    return {"method": label, "n": c["n"], "em_base": c["em_b"], "em_trained": c["em_a"],
            "em_delta": c["em_delta"], "em_low": c["em_delta_low"], "em_high": c["em_delta_high"],
            "f1_delta": c["f1_delta"], "mcnemar_p": c["mcnemar_p"]}  # fmt: skip


def paired(root: Path, model_a: str, model_b: str) -> dict:
    """The paired comparison of two trained models on the test questions both answered, as
    ``eval_compare`` computes it for a model and its base."""
    from ragfactory.tasks.eval.compare import CompareConfig, compare_rows
    from ragfactory.tasks.llm.cache import utc_now
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(root / "wh")
    rows = [query(wh, "select * from evals where model_id = $m", {"m": m}).to_pylist() for m in (model_a, model_b)]
    return compare_rows(*rows, CompareConfig(), utc_now())[0]


def rung_scores(root: Path) -> list[dict]:
    """EM and retrievals a question per model and rung of the world's test questions."""
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    sql = """select e.model_id as model, json_extract_string(q.metadata, '$.rung') as rung, count(distinct e.question_id) as n,
               round(avg(e.em), 3) as em, round(avg(e.n_retrievals), 2) as retrievals
             from evals e join questions q using (question_id) group by all order by all"""
    return query(Warehouse(root / "wh"), sql).to_pylist()


def train(root: Path, stages: dict, name: str, args: argparse.Namespace, source: list[str]) -> str:
    """SFT of the embedded model; returns the model id (the model of that name ``root`` has
    already, when it has one)."""
    if (done := _model(root, name)) is not None:
        return done
    trl = [f"max_steps={args.steps}", f"learning_rate={args.lr}"]
    trl += [] if args.bf16 is None else [f"bf16={str(args.bf16).lower()}"]  # default: the trainer's choice
    run(["train", "--method", "sft", *source, *[a for t in trl for a in ("--trl", t)],
               "--name", name, "--root", str(root / "wh")], stages, f"train {name}")  # fmt: skip
    return _model(root, name)


def _model(root: Path, name: str) -> str | None:
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    if not (root / "wh").is_dir():
        return None
    sql = (
        "select model_id from models where json_extract_string(lineage, '$.name') = $n order by created_at desc limit 1"
    )
    ids = query(Warehouse(root / "wh"), sql, {"n": name}).column(0).to_pylist()
    return ids[0] if ids else None


def main(args: argparse.Namespace) -> None:
    root = Path(args.root or tempfile.mkdtemp(prefix="learning-"))
    stages: dict = {}
    questions = max(round(args.train / 0.6), round(args.test / 0.25))  # the world's default shares
    if not (root / "world" / "world.json").is_file():  # a --root given again resumes where it stopped
        run(["world", "--seed", str(args.seed), "--questions", str(questions), "--passages", str(args.passages),
             "--rungs", args.rungs, str(root / "world")], stages, "world")  # fmt: skip
    run_id = build(root, root / "world", args.train, stages)
    models = {"r3-sft (kept)": train(root, stages, "world-r3-sft", args, ["--run-id", run_id])}
    if args.control != "none":
        rows_of = {"pruned": pruned_rows, "scrambled": scrambled_rows}[args.control]
        control = ["--parquet", str(rows_of(root, run_id))]
        models[f"control ({args.control})"] = train(root, stages, f"world-r3-sft-{args.control}", args, control)
    rows = []
    for label, model in models.items():
        rows.append(table_row(label, evaluate(root, model, args.test, stages, f"evaluate {label}")))
    if args.control != "none":  # the answer labels' own share: kept against control, question by question
        rows.append(table_row("kept vs control", paired(root, *models.values())))
    report("learning", rows)
    report("learning_rungs", rung_scores(root))
    report("learning_stages", [{"stage": k, **v} for k, v in stages.items()])
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"root: {root}; peak resident memory of one stage: {peak:,.0f} MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=200, help="world train questions the build expands")
    parser.add_argument("--test", type=int, default=200, help="world test questions both models answer")
    parser.add_argument("--passages", type=int, default=3000, help="the world corpus's size")
    parser.add_argument("--steps", type=int, default=12, help="SFT steps (TRL's batch of 8)")
    parser.add_argument("--lr", type=float, default=1e-4, help="SFT learning rate")
    parser.add_argument("--rungs", default="lookup,bridge,comparison,chain", help="the world's question rungs")
    parser.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bf16 autocast in training (default: where the device has bf16 instructions; about 2x a step)",
    )
    parser.add_argument(
        "--control",
        choices=["pruned", "scrambled", "none"],
        default="pruned",
        help="the control trained and evaluated beside: pruned trajectories (the kept queries, a wrong answer), "
        "kept steps scrambled across questions, or none",
    )
    parser.add_argument("--root", default=None)
    main(parser.parse_args())
