"""Training throughput on CPU: tokens per second of TRL SFT, DPO and GRPO on the embedded model.

Each method trains a few steps on rows built from bundled HotpotQA questions (SFT: a search
step and an answer; DPO: the gold answer over a wrong one; GRPO: the question with the answer
rewards), through the same ``train_planned`` the train flow calls. Tokens are the trainer's own
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
    docs = [{"role": "user", "content": f"Observation: {p['title']}: {p['text']}"}
            for p in passages[:len(questions)]]
    wh.write("sft_examples", [{"example_id": f"e{i}", "run_id": "bench", "messages": [*u, s, d, *a]}
                              for i, (u, s, d, a) in enumerate(zip(user, search, docs, answer))], "bench")
    wh.write("preference_pairs", [
        {"pair_id": f"p{i}", "run_id": "bench", "prompt": u, "chosen": a,
         "rejected": [{"role": "assistant", "content": "<answer>unknown</answer>"}]}
        for i, (u, a) in enumerate(zip(user, answer))], "bench")
    wh.write("grpo_prompts", [{"prompt_id": f"g{i}", "run_id": "bench", "prompt": u, "task": "qa",
                               "golden_answers": q["golden_answers"]}
                              for i, (u, q) in enumerate(zip(user, questions))], "bench")


def main() -> None:
    log = logging.getLogger("bench.training")
    rows = []
    # The converted checkpoint of the default warehouse (converted once, outside the timings).
    base = str(embedded_model_path(Warehouse().artifacts_dir("models")))
    with tempfile.TemporaryDirectory() as tmp:
        wh = Warehouse(tmp)
        write_exports(wh)
        for method in ("sft", "dpo", "grpo"):
            extra = ({"num_generations": 2, "max_completion_length": 32} if method == "grpo"
                     else {"max_length": 512})
            config = TrainConfig(method=method, run_id="bench", base_model=base, save_steps=1000, trl={
                "max_steps": STEPS, "per_device_train_batch_size": BATCH, "learning_rate": 1e-5,
                "include_num_input_tokens_seen": "non_padding", **extra})
            plan = plan_training(wh, config)
            start = time.perf_counter()
            metrics = train_planned(wh, config, plan, log)
            seconds = time.perf_counter() - start
            tokens = metrics.get("num_input_tokens_seen") or 0.0
            rows.append({"method": method, "steps": STEPS, "batch": BATCH, "tokens": int(tokens),
                         "seconds": round(seconds, 1), "tokens_per_s": round(tokens / seconds, 1),
                         "s_per_step": round(seconds / STEPS, 2)})
    sft = rows[0]["tokens_per_s"] or 1.0
    for row in rows:
        row["vs_sft"] = round(row["tokens_per_s"] / sft, 2)
    report("training", rows)


if __name__ == "__main__":
    main()
