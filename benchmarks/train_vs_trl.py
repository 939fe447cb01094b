"""Training speed and memory: the factory's SFT and DPO against TRL's own trainers, same rows.

A small warehouse holds the demo's shape (8 preference pairs, 8 SFT conversations, each prompt a
question, a search and an observation of bundled HotpotQA paragraphs, long enough that
``max_length`` truncates). Each run is a process of its own: (a) the factory's path, the
``plan_training`` + ``train_planned`` the train flow calls, and (b) TRL's ``SFTTrainer`` /
``DPOTrainer`` built directly from the same exported rows (``datasets.Dataset.from_list``) with the
same arguments. The parent reads each child's peak resident size from ``os.wait4`` (the kernel's
``ru_maxrss`` of that process). The child times every optimizer step from a trainer callback
(steps/s over steps 2..n, so neither the model load nor the first step's warm-up counts) and
samples its resident size every 50 ms, kept as the peak of each phase: imports, trainer built
(model and reference model loaded, dataset tokenized, reference log-probs precomputed when the
config says so), and each step. ``--profile`` adds a torch profiler summary of one step.

The ``defaults`` rows train the factory's DPO with no argument but ``max_steps``: what a user of
``ragfactory train --method dpo`` gets, every weight trained (``factory``) and LoRA adapters only
(``factory-lora``, the train flow's ``lora.enabled``). Ratios compare runs of one invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import report  # noqa: E402

STEPS = 6  # the bench rows: steps/s over steps 2..6, so one slow step moves the ratio less
DEFAULT_STEPS = 3  # the defaults rows: a step of 8 micro-batches takes about a minute
SEED = 0
ARGS = {"max_steps": STEPS, "per_device_train_batch_size": 2, "max_length": 512, "learning_rate": 1e-5}
EXPORT = {"sft": "sft_examples", "dpo": "preference_pairs"}


def write_exports(root: str, n: int = 8) -> None:
    """``n`` SFT conversations and ``n`` pairs whose prompts carry three paragraphs each."""
    from ragfactory.tasks.data.loaders import load_bundled
    from ragfactory.warehouse.store import Warehouse

    bundle = load_bundled("hotpotqa", limit=n)
    texts = [f"{p['title']}: {p['text']}" for p in bundle.passages]
    wh = Warehouse(root)
    prompts, answers = [], []
    for i, q in enumerate(bundle.questions):
        docs = "\n".join(texts[(3 * i + k) % len(texts)] for k in range(3))
        prompts.append(
            [
                {"role": "user", "content": f"Answer with <answer>…</answer>. {q['question']}"},
                {"role": "assistant", "content": f"<search>{q['question']}</search>"},
                {"role": "user", "content": f"Observation: {docs}"},
            ]
        )
        answers.append([{"role": "assistant", "content": f"<answer>{q['golden_answers'][0]}</answer>"}])
    wh.write(
        "sft_examples",
        [
            {"example_id": f"e{i}", "run_id": "bench", "messages": p + a}
            for i, (p, a) in enumerate(zip(prompts, answers))
        ],
        "bench",
    )
    wh.write(
        "preference_pairs",
        [
            {
                "pair_id": f"p{i}",
                "run_id": "bench",
                "prompt": p,
                "chosen": a,
                "rejected": [{"role": "assistant", "content": "<answer>unknown</answer>"}],
            }
            for i, (p, a) in enumerate(zip(prompts, answers))
        ],
        "bench",
    )


# --- the child: one training in this process ---------------------------------------------------


class RssSampler(threading.Thread):
    """The resident size every 50 ms, its peak kept per named phase."""

    def __init__(self):
        super().__init__(daemon=True)
        self.phase, self.peaks, self.page = "imports", {}, os.sysconf("SC_PAGE_SIZE")

    def rss_mb(self) -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page / 1e6

    def run(self) -> None:
        while True:
            rss = self.rss_mb()
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), round(rss))
            time.sleep(0.05)


def step_callback(sampler: RssSampler, times: list[float]):
    """A TRL callback that marks phases and times each optimizer step."""
    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        def on_init_end(self, args, state, control, **kw):
            sampler.phase = "trainer_built"

        def on_step_begin(self, args, state, control, **kw):
            sampler.phase = f"step_{state.global_step + 1}"
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.start)
            sampler.phase = "after_steps"

    return Steps()


def factory_trainer(root: str, method: str, trl: dict, callback, lora: bool = False):
    """Train through the factory's runner (LoRA adapters when ``lora``); returns its metrics."""
    import logging

    from ragfactory.flows.config import TrainConfig
    from ragfactory.tasks.training.runs import plan_training, train_planned
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(root)
    config = TrainConfig(
        method=method,
        run_id="bench",
        base_model=base_model(),
        save_steps=1000,
        seed=SEED,
        trl=trl,
        output_dir=tempfile.mkdtemp(dir=root),
        lora={"enabled": lora},
    )
    return train_planned(wh, config, plan_training(wh, config), logging.getLogger("bench"), callbacks=[callback])


def trl_trainer(root: str, method: str, trl: dict, callback):
    """Train with TRL's own trainer on the same exported rows; returns its metrics."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    from ragfactory.tasks.training.data import export_files, read_export, sft_prompt_completions

    rows = read_export(export_files(root, EXPORT[method], "bench", None), method)
    if method == "sft":  # the prompt/completion rows the factory trains on (assistant turns only)
        rows = sft_prompt_completions(rows)
    model = AutoModelForCausalLM.from_pretrained(base_model(), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(base_model())
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    config_class, trainer_class = {"sft": (SFTConfig, SFTTrainer), "dpo": (DPOConfig, DPOTrainer)}[method]
    extra = {"completion_only_loss": True} if method == "sft" else {}
    args = config_class(
        output_dir=tempfile.mkdtemp(dir=root),
        seed=SEED,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        **extra,
        **trl,
    )
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[callback],
    )
    result = trainer.train()
    return {**result.metrics, "train_loss": result.training_loss}


def base_model() -> str:
    from ragfactory.tasks.llm.embedded import embedded_model_path
    from ragfactory.warehouse.store import Warehouse

    return str(embedded_model_path(Warehouse().artifacts_dir("models")))


def profile_step(trainer_fn, root, method, trl, sampler, times) -> list[dict]:
    """The ten ops that took most CPU time in step 2 (torch profiler, self time)."""
    from torch.profiler import ProfilerActivity, profile

    inner = step_callback(sampler, times)
    state = {}

    class Profiled(type(inner)):
        def on_step_begin(self, args, st, control, **kw):
            if st.global_step == 1:
                state["prof"] = profile(activities=[ProfilerActivity.CPU], profile_memory=True).__enter__()
            super().on_step_begin(args, st, control, **kw)

        def on_step_end(self, args, st, control, **kw):
            super().on_step_end(args, st, control, **kw)
            if "prof" in state and "done" not in state:
                state["prof"].__exit__(None, None, None)
                state["done"] = True

    trainer_fn(root, method, trl, Profiled())
    events = sorted(state["prof"].key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:10]
    return [
        {
            "op": e.key,
            "self_s": round(e.self_cpu_time_total / 1e6, 2),
            "calls": e.count,
            "self_mem_mb": round(e.self_cpu_memory_usage / 1e6),
        }
        for e in events
    ]


def child(side: str, method: str, root: str, trl: dict, out: str, profile: bool) -> None:
    sampler = RssSampler()
    sampler.start()
    times: list[float] = []
    fn = {"factory": factory_trainer, "trl": trl_trainer, "factory-lora": partial(factory_trainer, lora=True)}[side]
    result = {}
    if profile:
        result["profile"] = profile_step(fn, root, method, trl, sampler, times)
    else:
        metrics = fn(root, method, trl, step_callback(sampler, times))
        result["train_loss"] = round(float(metrics["train_loss"]), 4)
    timed = times[1:] or times
    result |= {
        "step_s": [round(t, 1) for t in times],
        "steps_per_s": round(len(timed) / sum(timed), 4),
        "phase_peak_mb": sampler.peaks,
    }
    Path(out).write_text(json.dumps(result))


# --- the parent: one process per run ------------------------------------------------------------


def run_child(side: str, method: str, root: str, trl: dict, profile: bool = False) -> dict:
    """Run one training in a process of its own; its results and the kernel's peak RSS."""
    out = Path(root) / f"{side}-{method}-{time.monotonic_ns()}.json"
    cmd = [sys.executable, __file__, "--child", side, method, root, json.dumps(trl), str(out)]
    proc = subprocess.Popen(cmd + (["--profile"] if profile else []), stdout=subprocess.DEVNULL)
    start = time.perf_counter()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{side} {method} failed (status {status}): {' '.join(cmd)}")
    result = json.loads(out.read_text())
    return {**result, "wall_s": round(time.perf_counter() - start, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024)}


def main(profile: bool) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as root:
        write_exports(root)
        base_model()  # converts the embedded checkpoint once, outside every run
        for method in ("sft", "dpo"):
            pair = {side: run_child(side, method, root, ARGS) for side in ("factory", "trl")}
            for side, result in pair.items():
                rows.append({"method": method, "side": side, "args": "bench", **result})
            rows[-2]["speed_vs_trl"] = round(pair["factory"]["steps_per_s"] / pair["trl"]["steps_per_s"], 2)
            rows[-2]["rss_vs_trl"] = round(pair["factory"]["peak_rss_mb"] / pair["trl"]["peak_rss_mb"], 2)
        rows.append(
            {
                "method": "dpo",
                "side": "factory",
                "args": "defaults",
                **run_child("factory", "dpo", root, {"max_steps": DEFAULT_STEPS}),
            }
        )
        rows.append(
            {
                "method": "dpo",
                "side": "factory-lora",
                "args": "defaults",
                **run_child("factory-lora", "dpo", root, {"max_steps": DEFAULT_STEPS}),
            }
        )
        if profile:
            for side in ("factory", "trl"):
                rows.append(
                    {
                        "method": "dpo",
                        "side": side,
                        "args": "bench-profiled",
                        **run_child(side, "dpo", root, ARGS, profile=True),
                    }
                )
    report("train_vs_trl", rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=5, metavar=("SIDE", "METHOD", "ROOT", "TRL", "OUT"))
    parser.add_argument("--profile", action="store_true", help="add a torch profiler summary of a DPO step")
    parsed = parser.parse_args()
    if parsed.child:
        side, method, root, trl, out = parsed.child
        child(side, method, root, json.loads(trl), out, parsed.profile)
    else:
        main(parsed.profile)
