"""Training throughput on CPU: tokens per second of every training method on the embedded model.

Each method trains a few steps on rows built from bundled HotpotQA questions (SFT: a search
step and an answer; DPO: the gold answer over a wrong one; GRPO: the question with the answer
rewards; tree-advantage: a search, its observation and the answer with advantages +1 / -1; PRM:
the same two steps labelled; agentic GRPO: TreePS's prompt, BM25 over the questions' paragraphs
answering each search, each turn held to the ``treeps_step`` grammar), through the same
``train_planned`` the train flow calls (agentic GRPO through its ``build_trainer`` with the
retriever handed in, as the warehouse here has no build run). Tokens are the trainer's own
count of non-padding input tokens (``include_num_input_tokens_seen``), so GRPO counts prompts
and its sampled completions; the model load and the first step's warm-up are timed with the rest.
The ratios compare each method with SFT in the same run.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import report  # noqa: E402
from ragfactory.flows.config import TrainConfig  # noqa: E402
from ragfactory.tasks.data.loaders import load_bundled  # noqa: E402
from ragfactory.tasks.llm.embedded import embedded_model_path  # noqa: E402
from ragfactory.tasks.training.runs import plan_training, train_planned  # noqa: E402
from ragfactory.warehouse.store import Warehouse  # noqa: E402

STEPS = 3
BATCH = 2


def write_exports(wh: Warehouse, n: int = 12) -> None:
    bundle = load_bundled("hotpotqa", limit=n)
    questions, passages = bundle.questions, bundle.passages
    user = [[{"role": "user", "content": f"Answer with <answer>…</answer>. {q['question']}"}] for q in questions]
    answer = [[{"role": "assistant", "content": f"<answer>{q['golden_answers'][0]}</answer>"}] for q in questions]
    search = [{"role": "assistant", "content": f"<search>{q['question']}</search>"} for q in questions]
    docs = [{"role": "user", "content": f"Observation: {p['title']}: {p['text']}"} for p in passages[: len(questions)]]
    wh.write(
        "sft_examples",
        [
            {"example_id": f"e{i}", "run_id": "bench", "messages": [*u, s, d, *a]}
            for i, (u, s, d, a) in enumerate(zip(user, search, docs, answer))
        ],
        "bench",
    )
    wh.write(
        "preference_pairs",
        [
            {
                "pair_id": f"p{i}",
                "run_id": "bench",
                "prompt": u,
                "chosen": a,
                "rejected": [{"role": "assistant", "content": "<answer>unknown</answer>"}],
            }
            for i, (u, a) in enumerate(zip(user, answer))
        ],
        "bench",
    )
    wh.write(
        "grpo_prompts",
        [
            {
                "prompt_id": f"g{i}",
                "run_id": "bench",
                "prompt": u,
                "task": "qa",
                "golden_answers": q["golden_answers"],
                "question_id": q["question_id"],
            }
            for i, (u, q) in enumerate(zip(user, questions))
        ],
        "bench",
    )
    steps = [
        (s["content"], f"\n\n<information>{d['content']}</information>\n\n", a[0]["content"])
        for s, d, a in zip(search, docs, answer)
    ]
    wh.write("trajectories", [trajectory(f"t{i}", u, *step) for i, (u, step) in enumerate(zip(user, steps))], "bench")
    wh.write(
        "step_labels",
        [
            {
                "label_id": f"l{i}",
                "run_id": "bench",
                "prompt": u[0]["content"],
                "completions": [s + o.rstrip(), a],
                "labels": [True, i % 2 == 0],
            }
            for i, (u, (s, o, a)) in enumerate(zip(user, steps))
        ],
        "bench",
    )


def trajectory(trajectory_id: str, prompt: list, search: str, observation: str, answer: str) -> dict:
    """A two-step trajectory: the search with advantage +1, the answer with -1."""
    at = len(search) + len(observation)
    return {
        "trajectory_id": trajectory_id,
        "run_id": "bench",
        "prompt": prompt,
        "is_sampled": True,
        "response": search + observation + answer,
        "step_spans": [
            {"node_id": "s", "char_start": 0, "char_end": len(search), "advantage": 1.0},
            {"node_id": "a", "char_start": at, "char_end": at + len(answer), "advantage": -1.0},
        ],
        "observation_spans": [{"char_start": len(search), "char_end": at}],
    }


METHOD_SETTINGS = {
    "grpo": {"num_generations": 2, "max_completion_length": 32},
    "grpo-agentic": {"num_generations": 2, "max_completion_length": 128},
    "tree-advantage": {"max_length": 512},
    "prm": {},
}


def agentic_metrics(wh: Warehouse, config: TrainConfig, plan, log) -> dict:
    """Agentic GRPO with BM25 over the bundled paragraphs (no build run to read an index from)."""
    from ragfactory.tasks.data.loaders import load_bundled as bundled
    from ragfactory.tasks.retrieval.bm25 import BM25Retriever
    from ragfactory.tasks.search.treeps.steps import initial_prompt
    from ragfactory.tasks.training.agentic import build_trainer
    from ragfactory.tasks.training.data import read_export
    from ragfactory.tasks.training.methods import MethodContext
    from ragfactory.tasks.training.trainers import run_training
    from ragfactory.warehouse.store import conform

    bundle = bundled("hotpotqa", limit=12)
    texts = {q["question_id"]: q["question"] for q in bundle.questions}
    rows = [
        {**row, "prompt": [{"role": "user", "content": initial_prompt(texts[row["question_id"]], "treeps_step")}]}
        for row in read_export([Path(f) for f in plan.files], "grpo-agentic")
    ]
    ctx = MethodContext(
        rows=rows,
        model_path=plan.base_model,
        output_dir=plan.output_dir,
        trl=config.trl,
        save_steps=config.save_steps,
        seed=0,
        logger=log,
        rewards=["answer_f1", "format"],
        options={"max_turns": 2, "grammar": "treeps_step", "turn_tokens": 64},
    )
    trainer = build_trainer(ctx, retriever=BM25Retriever.build(conform("passages", bundle.passages)))
    return run_training(trainer, plan.output_dir)


def main() -> None:
    log = logging.getLogger("bench.training")
    rows = []
    # The converted checkpoint of the default warehouse (converted once, outside the timings).
    base = str(embedded_model_path(Warehouse().artifacts_dir("models")))
    with tempfile.TemporaryDirectory() as tmp:
        wh = Warehouse(tmp)
        write_exports(wh)
        for method in ("sft", "dpo", "grpo", "tree-advantage", "prm", "grpo-agentic"):
            extra = METHOD_SETTINGS.get(method, {"max_length": 512})
            config = TrainConfig(
                method=method,
                run_id="bench",
                base_model=base,
                save_steps=1000,
                trl={
                    "max_steps": STEPS,
                    "per_device_train_batch_size": BATCH,
                    "learning_rate": 1e-5,
                    "include_num_input_tokens_seen": "non_padding",
                    **extra,
                },
            )
            plan = plan_training(wh, config)
            start = time.perf_counter()
            metrics = (
                agentic_metrics(wh, config, plan, log)
                if method == "grpo-agentic"
                else train_planned(wh, config, plan, log)
            )
            seconds = time.perf_counter() - start
            tokens = metrics.get("num_input_tokens_seen") or 0.0
            rows.append(
                {
                    "method": method,
                    "steps": STEPS,
                    "batch": BATCH,
                    "tokens": int(tokens),
                    "seconds": round(seconds, 1),
                    "tokens_per_s": round(tokens / seconds, 1),
                    "s_per_step": round(seconds / STEPS, 2),
                }
            )
    sft = rows[0]["tokens_per_s"] or 1.0
    for row in rows:
        row["vs_sft"] = round(row["tokens_per_s"] / sft, 2)
    report("training", rows)


if __name__ == "__main__":
    main()
