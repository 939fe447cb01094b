"""SFT, DPO and GRPO through the pure training functions, on a tiny random Llama (seconds each)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from safetensors.torch import load_file
from transformers import TrainerCallback

from ragfactory.flows.config import TrainConfig
from ragfactory.tasks.training.data import read_export, sft_prompt_completions, training_dataset
from ragfactory.tasks.training.registry import cache_key
from ragfactory.tasks.training.runs import plan_training, train_planned
from ragfactory.tasks.training.trainers import load_model, make_trainer, trl_args
from ragfactory.warehouse.store import Warehouse
from tests.training.exports import CONVERSATION, write_exports
from tests.training.failing import FailOnce


def _config(method: str, model: str, **trl) -> TrainConfig:
    steps = {"max_steps": 1, "per_device_train_batch_size": 2, "learning_rate": 1e-3}
    extra = {"max_completion_length": 8} if method == "grpo" else {}
    return TrainConfig(
        method=method, run_id="run-1", base_model=model, rewards=["format", "varied"], trl={**steps, **extra, **trl}
    )


def varied(prompts, completions, **columns):
    """Differs between completions, so GRPO sees non-zero advantages even on a random model."""
    return [float(len(str(c)) % 7) for c in completions]


def _weights(folder) -> dict:
    return load_file(str(Path(folder) / "model.safetensors"))


@pytest.mark.parametrize("method", ["sft", "dpo", "grpo"])
def test_one_step_trains_saves_and_logs(method, tiny_model, tmp_path, log):
    wh = Warehouse(tmp_path)
    write_exports(wh)
    config = _config(method, tiny_model)
    plan = plan_training(wh, config)
    metrics = train_planned(wh, config, plan, log, extra_rewards={"varied": varied})
    assert math.isfinite(metrics["train_loss"]) and metrics["global_step"] == 1
    before, after = _weights(tiny_model), _weights(plan.output_dir)
    assert any(not before[name].equal(after[name]) for name in before), "no parameter changed"
    assert any("step 1/1 (100%) loss" in line for line in log.lines), log.lines
    assert not list(Path(plan.output_dir).glob("checkpoint-*"))


def test_lora_saves_an_adapter(tiny_model, tmp_path, log):
    wh = Warehouse(tmp_path)
    write_exports(wh)
    config = _config("sft", tiny_model).model_copy(update={"lora": {"enabled": True, "r": 4}})
    config = TrainConfig.model_validate(config.model_dump())
    plan = plan_training(wh, config)
    train_planned(wh, config, plan, log)
    assert (Path(plan.output_dir) / "adapter_config.json").is_file()


def test_sft_rows_put_each_assistant_turn_in_a_completion():
    rows = sft_prompt_completions([{"messages": CONVERSATION}])
    assert [r["completion"][0]["content"] for r in rows] == [CONVERSATION[2]["content"], CONVERSATION[4]["content"]]
    assert rows[1]["prompt"] == CONVERSATION[:4]
    with pytest.raises(ValueError, match="sft row 1"):
        sft_prompt_completions([{"messages": CONVERSATION}, {"messages": CONVERSATION[:2]}])


def test_sft_loss_covers_assistant_tokens_only(tiny_model, tmp_path):
    model, tokenizer = load_model(tiny_model)
    data = training_dataset([{"messages": CONVERSATION}], "sft")
    args = trl_args("sft", tmp_path, save_steps=10, seed=0, overrides={"max_steps": 1})
    trainer = make_trainer("sft", model, tokenizer, data, args)
    batch = trainer.data_collator([trainer.train_dataset[1]])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    trained = tokenizer.decode(ids[labels != -100])
    masked = tokenizer.decode(ids[labels == -100])
    assert trained.startswith("<answer>Paris</answer>") and "Observation" not in trained
    assert "capital of France" in masked and "Observation: Paris" in masked
    assert "<question>Which city" in masked  # an earlier assistant turn is context here


def _three_steps_saved_each(tiny_model, tmp_path):
    """A planned SFT run of three steps with a checkpoint due at every step."""
    wh = Warehouse(tmp_path)
    write_exports(wh)
    config = _config("sft", tiny_model, max_steps=3).model_copy(update={"save_steps": 1})
    return wh, config, plan_training(wh, config)


def test_a_retry_resumes_from_the_last_checkpoint(tiny_model, tmp_path, log):
    wh, config, plan = _three_steps_saved_each(tiny_model, tmp_path)
    fail = FailOnce()
    with pytest.raises(RuntimeError, match="worker lost"):
        train_planned(wh, config, plan, log, callbacks=[fail])
    assert (Path(plan.output_dir) / "checkpoint-1").is_dir()
    metrics = train_planned(wh, config, plan, log, callbacks=[fail])
    assert metrics["resumed_from"].endswith("checkpoint-1")
    assert metrics["global_step"] == 3
    assert "training from step 1 to 3" in " | ".join(log.lines)


class SavedSteps(TrainerCallback):
    """The steps at which the trainer wrote a checkpoint."""

    def __init__(self):
        self.steps: list[int] = []

    def on_save(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)


def test_every_save_step_but_the_last_writes_a_checkpoint(tiny_model, tmp_path, log):
    wh, config, plan = _three_steps_saved_each(tiny_model, tmp_path)
    saved = SavedSteps()
    metrics = train_planned(wh, config, plan, log, callbacks=[saved])
    assert metrics["global_step"] == 3
    assert saved.steps == [1, 2]  # step 3's weights are the model run_training saves
    assert (Path(plan.output_dir) / "model.safetensors").is_file()
    assert not list(Path(plan.output_dir).glob("checkpoint-*"))


BASE = dict(export_snapshot="abc", method="sft", config={"trl": {"max_steps": 1}}, base_model="m")


@pytest.mark.parametrize(
    "change",
    [
        {"export_snapshot": "abd"},
        {"method": "dpo"},
        {"config": {"trl": {"max_steps": 2}}},
        {"base_model": "other"},
    ],
)
def test_cache_key_is_stable_and_sensitive(change):
    assert cache_key(**BASE) == cache_key(**dict(reversed(list(BASE.items()))))
    assert cache_key(**BASE) != cache_key(**{**BASE, **change})


def test_plan_depends_on_export_content_not_location(tiny_model, tmp_path):
    first, second = Warehouse(tmp_path / "a"), Warehouse(tmp_path / "b")
    write_exports(first)
    write_exports(second)
    config = _config("dpo", tiny_model)
    assert plan_training(first, config).model_id == plan_training(second, config).model_id
    write_exports(second, n=5)
    assert plan_training(first, config).model_id != plan_training(second, config).model_id


def test_missing_export_and_column_errors_are_clear(tiny_model, tmp_path):
    wh = Warehouse(tmp_path)
    with pytest.raises(FileNotFoundError, match="sft_examples of run 'run-1'"):
        plan_training(wh, _config("sft", tiny_model))
    path = wh.write("sft_examples", [{"example_id": "e", "run_id": "r", "messages": CONVERSATION}], "s")
    with pytest.raises(ValueError, match="needs column"):
        read_export([path], "dpo")


def test_the_eta_is_the_remaining_steps_at_the_pace_so_far():
    import logging
    from types import SimpleNamespace

    from ragfactory.tasks.training.progress import LossLogger

    progress = LossLogger(logging.getLogger("eta"))
    assert progress.eta(1, 10) == "?"  # before training began
    progress.on_train_begin(None, SimpleNamespace(global_step=2, max_steps=10), None)
    began = progress.started[0]
    assert progress.eta(2, 10, now=began + 5) == "?"  # no step done since it began (resumed at 2)
    assert progress.eta(4, 10, now=began + 30) == "01m30s"  # 15 s a step, 6 steps left
    assert progress.eta(4, 1000, now=began + 30) == "4h09m00s"  # 996 steps x 15 s


@pytest.mark.parametrize("method,micro", [("sft", (2, 4)), ("dpo", (1, 8))])
def test_the_default_batch_of_8_runs_as_micro_batches(method, micro, tmp_path):
    args = trl_args(method, tmp_path, save_steps=10, seed=0)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == micro
    asked = trl_args(method, tmp_path, save_steps=10, seed=0, overrides={"per_device_train_batch_size": 3})
    assert (asked.per_device_train_batch_size, asked.gradient_accumulation_steps) == (3, 1)


@pytest.mark.parametrize("method", ["sft", "dpo", "grpo"])
def test_a_methods_config_says_activation_checkpointing_by_its_current_name(method, tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # transformers warns on gradient_checkpointing
        args = trl_args(method, tmp_path, save_steps=10, seed=0)
        off = trl_args(method, tmp_path, save_steps=10, seed=0, overrides={"gradient_checkpointing": False})
    # releases before the rename have only the old field (the test below)
    name = "activation_checkpointing" if hasattr(args, "activation_checkpointing") else "gradient_checkpointing"
    assert (getattr(args, name), args.gradient_checkpointing) == (True, True)  # TRL's default
    assert (getattr(off, name), off.gradient_checkpointing) == (False, False)  # the old name still works


def test_a_transformers_without_the_new_name_gets_checkpointing_under_the_old_one():
    """Releases before the rename (5.17, a GPU image's) have no ``activation_checkpointing`` field: a
    method's default, or an override of either name, reaches them as ``gradient_checkpointing``."""
    import dataclasses

    from ragfactory.tasks.training.trainers import _checkpointing_by_its_name, _renamed

    @dataclasses.dataclass
    class OldConfig:
        gradient_checkpointing: bool = False

    dpo = {"seed": 0, "activation_checkpointing": True}  # the DPO spec's default
    _checkpointing_by_its_name(OldConfig, dpo)
    assert dpo == {"seed": 0, "gradient_checkpointing": True}
    for override in ({"gradient_checkpointing": False}, {"activation_checkpointing": False}):
        kwargs = {"activation_checkpointing": True, **_renamed(override)}
        _checkpointing_by_its_name(OldConfig, kwargs)
        assert kwargs == {"gradient_checkpointing": False}
    untouched = {"seed": 0}
    _checkpointing_by_its_name(OldConfig, untouched)
    assert untouched == {"seed": 0}


def test_dpo_computes_its_reference_log_probs_once_and_recomputes_activations(tmp_path):
    args = trl_args("dpo", tmp_path, save_steps=10, seed=0)
    assert (args.precompute_ref_log_probs, args.precompute_ref_batch_size, args.gradient_checkpointing) == (
        True,
        1,
        True,
    )
