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
  trajectory a question (its first attempt best-of-N rejected, from the step where it leaves the
  kept one: a query about another entity, or a wrong final answer: ``--control pruned``; a step
  both attempts hold is a kept label), or on the kept steps each
  given the completion of a question of another kind (``--control scrambled``; ``scrambled-kind``:
  of the same kind, so the labels keep their form).
- ``mcts-dpo``: ReasonRAG's MCTS (§2.2) with the world's teacher engine as its policy
  (``tasks/search/mcts/teacher.py``: it errs on half its samples), SPRE-valued sibling pairs, DPO
  on them, evaluated in the ``agentic`` mode (ReasonRAG's Reasoning / Grounding loop). Control:
  DPO on the same pairs with chosen and rejected swapped.
- ``mcts-dpo-sft``: the same pairs and DPO with the chosen step's NLL added to its loss (TRL's
  ``loss_type: [sigmoid, sft]``). Control: the same training on the pairs swapped.
- ``decex-sft``: DecEx-RAG's search (§2.1–2.2) with the world's teacher engine as its policy
  (``tasks/search/decex/teacher.py``), SFT on the steps of each question's best chain (§2.3),
  evaluated in the ``decex`` mode (DecEx's step loop: the rollout prompt with the steps so far).
  Controls: as ``r3-sft``'s, the kept chain with a pruned wrong final answer (``pruned``) or the
  kept steps scrambled across questions, or each kept step replaced by the sibling its values
  pruned (``rejected``: a guess where the chain searched, a wrong answer where it answered).
- ``decex-dpo-sft``: DPO with the chosen step's NLL on DecEx's sibling pairs (a search over a
  guess, the right final answer over a wrong one), in the same mode. Control: the pairs swapped.
- ``treeps-tree-advantage``: TreePS-RAG's tree search (§2.1–2.2) with the world's teacher engine
  as its policy (``tasks/search/treeps/teacher.py``: it guesses on half its samples), the
  trajectories' tree advantages (Eq. 3) trained offline (``tasks/training/tree_advantage.py``),
  evaluated in the ``treeps`` mode (the step chat the trees grow). Control: every advantage
  negated (the rewards' sign flipped).
- ``treeps-tree-advantage-current``: the same with π_old the policy at each step
  (``old_policy: current``), not the base, as trees another policy grew call for.
- ``apex-grpo``: APEX-Searcher's planner (§2.2): the embedded model's plans scored by SEPR
  against the world's gold decompositions, GRPO on the planner prompts with SEPR as its reward
  (TRL's trainer, generating online), evaluated in the ``apex`` mode (plan, then execute), with
  each plan's SEPR F1 against the base's as well (``learning_plans``). Control: the reward
  negated.

Every stage runs as a user runs it (``ragfactory world``, ``build``, ``train``, ``evaluate``), in
a warehouse of its own; the CPU seconds and the peak resident memory of each are the children's
as the kernel counts them.

Run: .venv/bin/python benchmarks/learning.py [--methods r3-sft,mcts-dpo-sft] [--train 200] [--test 200] [--steps 12]
     [--rungs lookup] [--root DIR]

A ``--root`` given again resumes: its world, its completed build and its models of the same name
trained on the same rows are reused (so another control can be trained beside an earlier run's
kept model; a control whose rows were written again trains again).
``--balance`` trains an SFT method on its rows balanced by step depth (``learning_balance.py``);
``--mentions`` builds on a world whose passages name a second object of each fact's kind;
``--reading`` reports each model's reading against the base handed the passages
(``learning_reading.py``).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import report  # noqa: E402
from benchmarks.learning_balance import balanced_rows  # noqa: E402
from benchmarks.learning_controls import CONTROLS  # noqa: E402
from benchmarks.learning_plans import plan_rows  # noqa: E402
from benchmarks.learning_reading import RAG_BASE, covers, reading_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "ragfactory.cli"]


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


# What each method builds with, trains and is evaluated in: the strategy and its settings (with the
# world's teacher engine for it as the policy), the training method and its TRL settings, and the
# evaluation mode that runs the inference the data trains, with the rounds its rungs need.
R3 = {"n_attempts": 4, "min_queries": 1, "judge_outcome": False, "judge_relevance": False, "metric": "em"}
# Siblings at temperature 0.5: the teacher errs on half its samples, so a state's two children
# differ as often as not; its greedy rollouts never err, so SPRE values a right step above a wrong
# one. No query is forced: the first step's pair is searching against answering at once.
MCTS = {"temperature": 0.5, "min_queries": 0, "metric": "em"}
METHODS = {
    # control None: the one --control names (pruned or scrambled)
    "r3-sft": {"strategy": "r3", "settings": R3, "teacher": "world:r3-teacher", "method": "sft",
               "trl": [], "mode": ["r3", "--max-rounds", "5", "--max-tokens", "96"], "control": None},
    # Reference log-probs at each step, not precomputed over every pair of the export (a forward
    # pass over all of them, when a run of 16 steps reads 128); no activation recomputation (a
    # micro-batch of one pair of ~400 tokens holds little): a fifth of a step's compute each.
    "mcts-dpo": {"strategy": "mcts", "settings": MCTS, "teacher": "world:mcts-teacher", "method": "dpo",
                 "trl": ["precompute_ref_log_probs=false", "activation_checkpointing=false"],
                 "mode": ["agentic", "--max-rounds", "7", "--max-tokens", "64"], "control": "swapped"},
}  # fmt: skip
# DPO's sigmoid loss plus the chosen step's negative log-likelihood (TRL's loss_type [sigmoid, sft],
# weighted 1:1): from a base that does not write the step format, DPO alone lowers the rejected
# step's opening and the mass moves to an opening no pair holds (docs/world.md); the NLL term says
# what to write instead. Its control, the pairs swapped, trains the NLL of the wrong steps.
METHODS["mcts-dpo-sft"] = {**METHODS["mcts-dpo"], "trl": [*METHODS["mcts-dpo"]["trl"], "loss_type=[sigmoid,sft]"]}
# DecEx with the world's teacher as its policy, for every decision and rollout alike. At temperature
# 0.5 it errs on half its final answers, so a state's termination votes hold right and wrong
# answers to pair, and its rollouts (DecEx samples them at the search's temperature: there is no
# greedy one) value a searched sub-query at about 0.5 and a self-answer at 0 (a guess: the teacher
# knows no invented fact), so every retrieval decision searches and pairs the search over each of
# the k = 3 guesses. Five termination votes, not the paper's k = 3: at 0.5 three votes leave one
# question in eight without a right answer to keep, five one in 32. EM values the rollouts, as the
# evaluation scores. The rest are the paper's (4 rollouts a branch, 4 iterations, 3 documents):
# a chain's three hops fit T_max = 4, and its rollout from the first sub-question fits 4 turns.
DECEX = {"temperature": 0.5, "termination_samples": 5, "metric": "em"}
# Four turns of at most 66 tokens (a step's lines and its search, or the final answer) for a
# chain's three searches and its answer, one turn to spare.
DECEX_MODE = ["decex", "--max-rounds", "5", "--max-tokens", "96"]
METHODS["decex-sft"] = {"strategy": "decex", "settings": DECEX, "teacher": "world:decex-teacher", "method": "sft",
                        "trl": [], "mode": DECEX_MODE, "control": None}  # fmt: skip
METHODS["decex-dpo-sft"] = {**METHODS["decex-sft"], "method": "dpo", "trl": METHODS["mcts-dpo-sft"]["trl"],
                            "control": "swapped"}  # fmt: skip
# TreePS-RAG with the world's teacher as its policy at temperature 0.5: half a state's children
# guess at once, so a search's subtree is worth about 0.5 and a guess 0, and Eq. 3's advantages
# are positive on searches and right answers, negative on guesses. The rest is the paper's tree
# (N = 8, depth 4, 2 retained, 3 passages). Batches of 8 trajectories, as the other methods'.
TREEPS = {"temperature": 0.5, "metric": "em"}
METHODS["treeps-tree-advantage"] = {
    "strategy": "treeps", "settings": TREEPS, "teacher": "world:treeps-teacher", "method": "tree-advantage",
    "trl": ["per_device_train_batch_size=8"], "mode": ["treeps", "--max-rounds", "4", "--max-tokens", "64"],
    "control": "negated"}  # fmt: skip
# The same with π_old the policy at each step (``old_policy: current``, ρ = 1): the teacher grew the
# trees, so the base finds its steps unlikely, and the clip at the base (the default) stops each
# token at 1 + ε times the base's probability of it.
METHODS["treeps-tree-advantage-current"] = {
    **METHODS["treeps-tree-advantage"], "trl": [*METHODS["treeps-tree-advantage"]["trl"], "old_policy=current"]}  # fmt: skip
# APEX-Searcher's planner (§2.2): the embedded model samples two plans a train question (T = 1),
# scored by SEPR against the world's gold decomposition, and executes none (the planner's GRPO
# export is one prompt a question with its gold plan, whatever the samples were). GRPO then
# generates online: 8 plans a prompt (the paper's G) of up to 64 tokens (three steps take ~40),
# one prompt a step, rewarded by SEPR; no KL term (beta 0, TRL's default). Evaluated in the
# ``apex`` mode (plan, then execute; one hop a sub-question, which the world's passages need), with
# each plan's SEPR scored as well (``plan_f1``), since the base executes too. Control: the reward
# negated, so the worst plans are reinforced.
APEX = {"n_plans": 2, "n_execute": 0, "execute_gold": False, "metric": "em"}
METHODS["apex-grpo"] = {
    "strategy": "apex", "settings": APEX, "teacher": None, "method": "grpo", "lr": 5e-5,
    "args": ["--task", "plan", "--reward", "sepr"],
    "trl": ["num_generations=8", "per_device_train_batch_size=8", "max_completion_length=64",
            "activation_checkpointing=false"],
    "mode": ["apex", "--max-rounds", "1", "--max-tokens", "64"], "control": "negated-reward", "plan_f1": True}  # fmt: skip


def build(root: Path, world: Path, method: dict, train: int, stages: dict) -> str:
    """The method's strategy with the world's teacher on ``train`` world train questions; returns
    the run id (the warehouse's build of that strategy when ``root`` has one already)."""
    strategy = method["strategy"]
    if (done := _build_run(root, strategy)) is not None:
        return done
    config = yaml.safe_load((world / "build.yaml").read_text())
    config |= {
        "name": f"learning-{strategy}",
        "search": {"strategies": [strategy], "questions_per_dataset": train, "shard_size": 50,
                   strategy: method["settings"]},
        "export": {"decontamination": {"mode": "drop", "against": ["valid", "test"]}},
    }  # fmt: skip
    if method["teacher"] is not None:  # else the embedded model, the world's default policy
        config["llm"] = {"policy": {"backend": method["teacher"], "options": {"world": str(world)}}}
    path = root / f"build-{strategy}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    run(["build", "--config", str(path), "--root", str(root / "wh")], stages, f"build {strategy}")
    return _build_run(root, strategy)


def _build_run(root: Path, strategy: str) -> str | None:
    sql = """select run_id from runs where flow = 'build' and status = 'completed'
             and run_id in (select run_id from nodes where strategy = $s)"""
    return _first(root, sql, {"s": strategy})


def _first(root: Path, sql: str, params: dict) -> str | None:
    """The first value ``sql`` finds in ``root``'s warehouse; None before there is one."""
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    if not (root / "wh").is_dir():
        return None
    values = query(Warehouse(root / "wh"), sql, params).column(0).to_pylist()
    return values[0] if values else None


def evaluate(root: Path, model: str, method: dict, test: int, stages: dict, name: str) -> dict:
    """``model`` against the embedded base on ``test`` world test questions in the method's mode."""
    args = ["evaluate", "--model", model, "--compare", "embedded", "--dataset", "world", "--mode", *method["mode"]]
    args += ["--limit", str(test), "--source", "corpus"]
    args += ["--engine-option", "kv_cache_mb=1024"]  # the running batch holds ~20 step prompts, not ~5
    run([*args, "--root", str(root / "wh")], stages, name)
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    sql = "select * from eval_compare where model_a = $m order by created_at desc limit 1"
    return query(Warehouse(root / "wh"), sql, {"m": model}).to_pylist()[0]


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
    """EM and retrievals a question per model, mode and rung of the world's test questions."""
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    sql = """select e.model_id as model, e.mode, json_extract_string(q.metadata, '$.rung') as rung, count(distinct e.question_id) as n,
               round(avg(e.em), 3) as em, round(avg(e.n_retrievals), 2) as retrievals
             from evals e join questions q using (question_id) group by all order by all"""
    return query(Warehouse(root / "wh"), sql).to_pylist()


def train(root: Path, stages: dict, name: str, method: dict, args: argparse.Namespace, source: list[str]) -> str:
    """The method's training of the embedded model; returns the model id (the model of that name
    ``root`` has already trained on the same rows, when it has one)."""
    if (done := _model(root, name, source)) is not None:
        return done
    lr = method.get("lr") or (args.lr if method["method"] == "sft" else args.dpo_lr)
    trl = [f"max_steps={args.steps}", f"learning_rate={lr}", *method["trl"], *args.trl]
    trl += [] if args.bf16 is None else [f"bf16={str(args.bf16).lower()}"]  # default: the trainer's choice
    run(["train", "--method", method["method"], *method.get("args", []), *source,
         *[a for t in trl for a in ("--trl", t)], "--name", name, "--root", str(root / "wh")],
        stages, f"train {name}")  # fmt: skip
    return _model(root, name, source)


def _model(root: Path, name: str, source: list[str]) -> str | None:
    from ragfactory.tasks.training.data import snapshot_hash

    # a control's rows are a parquet file of their own: written again with other rows, they train again
    snapshot = snapshot_hash([Path(source[source.index("--parquet") + 1])]) if "--parquet" in source else ""
    sql = "select model_id from models where json_extract_string(lineage, '$.name') = $n"
    sql += " and $s in ('', export_snapshot) order by created_at desc limit 1"
    return _first(root, sql, {"n": name, "s": snapshot})


def control_source(method: dict, args: argparse.Namespace, root: Path, run_id: str):
    """(kind, train arguments) of the control a method trains beside it: its own, else the one
    ``--control`` names; None with ``--control none``."""
    if args.control == "none":
        return None
    kind = method["control"] or args.control
    return kind, CONTROLS[kind](root, run_id)


def measure(root: Path, name: str, args: argparse.Namespace, stages: dict) -> list[dict]:
    """One method's build, training, control and evaluations: its lines of the learning table."""
    method = METHODS[name]
    run_id = build(root, root / "world", method, args.train, stages)
    models = {}
    if not args.only_control:  # the method's model: its export, or (--balance) its rows balanced by depth
        source = ["--parquet", str(balanced_rows(root, run_id))] if args.balance else ["--run-id", run_id]
        models[name] = train(root, stages, f"world-{name}" + "-balanced" * args.balance, method, args, source)
    if (control := control_source(method, args, root, run_id)) is not None:
        kind, source = control
        models[f"{name} control ({kind})"] = train(root, stages, f"world-{name}-{kind}", method, args, source)
    rows = [table_row(label, evaluate(root, model, method, args.test, stages, f"evaluate {label}"))
            for label, model in models.items()]  # fmt: skip
    if len(models) == 2:  # the labels' own share: trained against control, question by question
        rows.append(table_row(f"{name} vs control", paired(root, *models.values())))
    if method.get("plan_f1"):
        report("learning_plans", plan_rows(root, models))
    if args.reading:
        report("learning_reading", reading(root, models, method, args.test, stages))
    return rows


def reading(root: Path, models: dict[str, str], method: dict, test: int, stages: dict) -> list[dict]:
    """Each model's cover-EM in its mode against the base's handed the passages (the ``rag`` mode,
    evaluated again only for more questions): what it reads beyond a base made to search once."""
    base = covers(root, RAG_BASE, "rag")
    if len(base) < test:
        tokens = method["mode"][method["mode"].index("--max-tokens") + 1]
        args = ["evaluate", "--model", RAG_BASE, "--dataset", "world", "--mode", "rag", "--max-tokens", tokens]
        args += ["--limit", str(test), "--source", "corpus", "--engine-option", "kv_cache_mb=1024"]
        run([*args, "--root", str(root / "wh")], stages, "evaluate base, rag")
        base = covers(root, RAG_BASE, "rag")
    scores = {label: covers(root, model, method["mode"][0]) for label, model in models.items()}
    return reading_rows(scores, base)


def main(args: argparse.Namespace) -> None:
    root = Path(args.root or tempfile.mkdtemp(prefix="learning-"))
    stages: dict = {}
    questions = max(round(args.train / 0.6), round(args.test / 0.25))  # the world's default shares
    if not (root / "world" / "world.json").is_file():  # a --root given again resumes where it stopped
        run(["world", "--seed", str(args.seed), "--questions", str(questions), "--passages", str(args.passages),
             "--rungs", args.rungs, *["--mentions"] * args.mentions, str(root / "world")], stages, "world")  # fmt: skip
    rows = [row for name in args.methods.split(",") for row in measure(root, name, args, stages)]
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
    parser.add_argument("--methods", default="r3-sft,mcts-dpo-sft", help=f"of {', '.join(METHODS)}")
    parser.add_argument("--steps", type=int, default=12, help="training steps (TRL's batch of 8)")
    parser.add_argument("--lr", type=float, default=1e-4, help="SFT learning rate")
    parser.add_argument(
        "--dpo-lr", type=float, default=1e-4, help="DPO learning rate (as SFT's: Adam moves the weights as far a step)"
    )
    parser.add_argument("--rungs", default="lookup,bridge,comparison,chain", help="the world's question rungs")
    parser.add_argument(
        "--mentions", action="store_true", help="passages name a second city, year and company (docs/world.md)"
    )
    parser.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bf16 autocast in training (default: where the device has bf16 instructions; about 2x a step)",
    )
    parser.add_argument(
        "--control",
        choices=["pruned", "rejected", "scrambled", "scrambled-kind", "none"],
        default="pruned",
        help="the control trained and evaluated beside SFT: pruned trajectories (an attempt best-of-N rejected: "
        "R3's first, DecEx's kept queries with a wrong answer), kept steps given labels of questions of another "
        "kind (scrambled) or the same kind (scrambled-kind: the labels' form kept), the siblings the values pruned "
        "in place of the kept steps (rejected: DecEx), or none (DPO's control is its pairs swapped)",
    )
    parser.add_argument(
        "--balance", action="store_true", help="SFT on its rows balanced by depth (learning_balance.py)"
    )
    parser.add_argument(
        "--reading",
        action="store_true",
        help="each model's cover-EM against the base handed the passages (rag mode; learning_reading.py)",
    )
    parser.add_argument(
        "--only-control", action="store_true", help="train and evaluate the control alone (the method measured before)"
    )
    parser.add_argument(
        "--trl",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a TRL setting every training of the run takes (repeatable), e.g. loss_type=[sigmoid,sft] (DPO with an NLL term on the chosen step)",
    )
    parser.add_argument("--root", default=None)
    main(parser.parse_args())
