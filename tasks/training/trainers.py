"""Run one TRL training (SFT, DPO or GRPO, optionally with LoRA) and return its metrics.

The TRL config is built from defaults that suit a worker (no external reporting, a checkpoint
every ``save_steps`` so a retried run resumes where it stopped, CUDA with bf16 when present, else
CPU), overlaid by the caller's overrides. SFT trains with ``completion_only_loss`` on the
prompt/completion rows of ``data.training_dataset``, so only assistant tokens carry loss.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragfactory.tasks.training.config import LoraSection
from ragfactory.tasks.training.methods import method_spec

# Why each default: metrics reach the registry, not a tracker; every step logged feeds the loss
# lines; checkpoints carry optimizer state so a resumed run continues the same trajectory.
WORKER_DEFAULTS: dict[str, Any] = {
    "report_to": [],
    "logging_steps": 1,
    "save_strategy": "steps",
    "save_total_limit": 2,
}


def device_settings() -> dict[str, Any]:
    """CUDA with bf16 when a GPU is present (and supports it), else the CPU; ``$RAGFACTORY_DEVICE``
    decides when set. On a CPU with bf16 instructions (AVX-512 BF16 or AMX) ``bf16`` is autocast
    over float32 weights (``weights_dtype``): a step of SmolLM2-135M on 8 rows of 860 tokens took
    29 s against 53 s in float32 on two cores. ``--trl bf16=false`` turns it off."""
    import torch

    from ragfactory.tasks.llm.device import default_device

    if default_device().startswith("cuda"):
        return {"bf16": bool(torch.cuda.is_bf16_supported()), "use_cpu": False}
    return {"use_cpu": True, "bf16": cpu_has_bf16()}


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively; elsewhere bf16 autocast is emulated and slower."""
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def weights_dtype():
    """The dtype a trained model is loaded in: bf16 on a CUDA device that has it, else float32 (on
    a CPU, bf16 is autocast only: master weights in bf16 lose small updates)."""
    import torch

    settings = device_settings()
    return torch.bfloat16 if settings["bf16"] and not settings["use_cpu"] else torch.float32


def vllm_generation() -> dict[str, Any]:
    """GRPO generation through vLLM (colocated with training) on CUDA workers that have it."""
    import importlib.util

    if device_settings()["use_cpu"] or importlib.util.find_spec("vllm") is None:
        return {}
    return {"use_vllm": True, "vllm_mode": "colocate"}


def trl_args(method: str, output_dir: str | Path, save_steps: int, seed: int, overrides: dict[str, Any] | None = None):
    """The TRL ``SFTConfig`` / ``DPOConfig`` / ``GRPOConfig`` (or a method's own config) of one run:
    the worker's defaults, the method's (its spec), the device's, then the caller's overrides."""
    spec = method_spec(method)
    config = spec.config_class
    generation = vllm_generation() if spec.vllm else {}
    defaults = dict(spec.defaults)
    if "per_device_train_batch_size" in (overrides or {}):  # a batch asked for is one forward, as in TRL
        defaults.pop("gradient_accumulation_steps", None)
    kwargs = {
        **WORKER_DEFAULTS,
        **defaults,
        **device_settings(),
        **generation,
        "save_steps": save_steps,
        "seed": seed,
        **_renamed(overrides or {}),
    }
    kwargs["output_dir"] = str(output_dir)
    _checkpointing_by_its_name(config, kwargs)
    try:
        return config(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{method}: bad TRL config override: {exc}") from exc


def _renamed(overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` with ``gradient_checkpointing`` under its current name, so that it overrides a
    method's ``activation_checkpointing`` default."""
    if "gradient_checkpointing" not in overrides or "activation_checkpointing" in overrides:
        return overrides
    renamed = {k: v for k, v in overrides.items() if k != "gradient_checkpointing"}
    return {**renamed, "activation_checkpointing": overrides["gradient_checkpointing"]}


def _checkpointing_by_its_name(config: type, kwargs: dict[str, Any]) -> None:
    """Activation recomputation under the name the installed transformers gives it. Newer releases
    call it ``activation_checkpointing`` and warn on every config that sets the old
    ``gradient_checkpointing``, which TRL's configs default to True: the new name is set instead,
    from the old one's value (an override, or the config's default). Older ones (5.17, say, a
    GPU image's) know only ``gradient_checkpointing``: a method's or caller's
    ``activation_checkpointing`` is passed under that name."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    if "activation_checkpointing" not in fields:
        if "activation_checkpointing" in kwargs:
            kwargs["gradient_checkpointing"] = kwargs.pop("activation_checkpointing")
        return
    old = fields.get("gradient_checkpointing")
    value = kwargs.pop("gradient_checkpointing", None if old is None else old.default)
    if isinstance(value, bool):
        kwargs.setdefault("activation_checkpointing", value)


def lora_config(lora: LoraSection):
    """A peft ``LoraConfig`` for causal LM adapters, or None for full fine-tuning."""
    if not lora.enabled:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )


def load_model(path: str | Path):
    """A causal LM and its tokenizer from a local folder or model id (bf16 on CUDA)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=weights_dtype())
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def last_checkpoint(output_dir: str | Path) -> str | None:
    """The newest ``checkpoint-N`` folder a previous attempt left, if any."""
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(output_dir)
    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def make_trainer(
    method: str,
    model,
    tokenizer,
    dataset,
    args,
    callbacks: Sequence = (),
    reward_funcs: Sequence | None = None,
    peft_config=None,
):
    """The stock TRL trainer of a method (its spec's ``trainer``), wired to the dataset, callbacks,
    optional adapters and, for a rewarded method, its reward functions."""
    spec = method_spec(method)
    common = dict(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=list(callbacks),
        peft_config=peft_config,
    )
    if spec.rewarded:
        if not reward_funcs:
            raise ValueError(f"{method} needs reward functions")
        common["reward_funcs"] = list(reward_funcs)
    return spec.trainer_class(**common)


def run_training(trainer, output_dir: str | Path, keep_checkpoints: bool = False) -> dict[str, Any]:
    """Train (resuming from the last checkpoint in ``output_dir``), save, and return metrics.
    Checkpoints are deleted once the model is saved, so none is written at the last step
    (``checkpoints.py``) unless ``keep_checkpoints``."""
    if trainer.train_dataset is not None and len(trainer.train_dataset) == 0:
        raise ValueError(
            "no training row is left after tokenization: every row was truncated "
            "away; raise max_length (TRL config override)"
        )
    resume = last_checkpoint(output_dir)
    if not keep_checkpoints:
        from ragfactory.tasks.training.checkpoints import NoFinalCheckpoint

        trainer.add_callback(NoFinalCheckpoint())
    result = trainer.train(resume_from_checkpoint=resume)
    if not math.isfinite(result.training_loss):
        raise FloatingPointError(f"training loss is {result.training_loss}; nothing saved")
    trainer.save_model(str(output_dir))
    if not keep_checkpoints:
        for folder in Path(output_dir).glob("checkpoint-*"):
            shutil.rmtree(folder, ignore_errors=True)

    def last_logged(key: str) -> dict:
        return next((e for e in reversed(trainer.state.log_history) if key in e), {})

    # GRPO logs each reward function's mean per step; the registry keeps the last step's.
    logged = {k: v for k, v in last_logged("reward").items() if k.startswith("reward")}
    if tokens := last_logged("num_input_tokens_seen"):
        logged["num_input_tokens_seen"] = tokens["num_input_tokens_seen"]
    numbers = {k: float(v) for k, v in {**result.metrics, **logged}.items() if isinstance(v, (int, float))}
    return {
        **numbers,
        "train_loss": float(result.training_loss),
        "global_step": int(trainer.state.global_step),
        "final_loss": float(last_logged("loss").get("loss", result.training_loss)),
        "resumed_from": resume,
    }
