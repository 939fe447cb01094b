"""The step-level PRM trainer on a tiny random Llama: layout, held-out split, training, reward."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragfactory.tasks.training.methods import MethodContext
from ragfactory.tasks.training.prm.heldout import heldout_ids
from ragfactory.tasks.training.prm.reward import prm_reward, split_steps, step_rewards
from ragfactory.tasks.training.prm.scoring import StepScorer, load_tokenizer
from ragfactory.tasks.training.prm.trainer import build_trainer
from ragfactory.tasks.training.runs import run_training

PROMPT = "Answer the question. Question: what is the capital of France?\n"
SEARCH = "<reason>look it up</reason><search> capital of France </search>"
OBSERVATION = "<information>Doc 1(Title: France) Paris is the capital of France.\n</information>"


def _context(rows, model, tmp_path, log, **fields) -> MethodContext:
    return MethodContext(
        rows=rows,
        model_path=model,
        output_dir=str(tmp_path / "prm"),
        trl=fields.pop("trl", {"max_steps": 1}),
        save_steps=100,
        seed=0,
        logger=log,
        **fields,
    )


def _row(label_id: str, good: bool) -> dict:
    """Good paths search and answer Paris; bad ones wander off to bananas."""
    steps = [
        f"{SEARCH}\n\n{OBSERVATION}",
        "<answer> Paris </answer>" if good else "<reason>bananas are yellow</reason><answer> banana </answer>",
    ]
    return {
        "label_id": label_id,
        "prompt": PROMPT,
        "completions": steps,
        "labels": [True, good],
        "step_values": [1.0, float(good)],
        "node_ids": ["n1", "n2"],
    }


def test_labels_sit_on_the_last_separator_token_of_each_step(tiny_model, tmp_path, log):
    row = {"label_id": "only", "prompt": "Q: 2+2?", "completions": ["two plus two", "is five"], "labels": [True, False]}
    trainer = build_trainer(_context([row], tiny_model, tmp_path, log))
    feature = trainer.train_dataset[0]
    tok = load_tokenizer(tiny_model)
    prompt = tok("Q: 2+2?")["input_ids"]
    first = tok("two plus two", add_special_tokens=False)["input_ids"]
    second = tok("is five", add_special_tokens=False)["input_ids"]
    separator = tok("\n", add_special_tokens=False)["input_ids"]
    assert separator == [198]  # SmolLM2's "\n" is one token
    assert feature["input_ids"] == prompt + first + separator + second + separator
    # the first step's separator ends after prompt + step 1 + "\n"; the second after all of it
    at_first = len(prompt) + len(first) + len(separator) - 1
    at_second = len(feature["input_ids"]) - 1
    labelled = {i: label for i, label in enumerate(feature["labels"]) if label != -100}
    assert labelled == {at_first: 1, at_second: 0}
    assert len(trainer.heldout) == 0  # one row: nothing held back


def test_the_held_out_split_is_pinned():
    # sha256(id)[:8 bytes] / 2**64: row-1 0.0603, row-2 0.2711, row-3 0.4626, row-4 0.0259,
    # row-5 0.3540, row-6 0.6313, row-7 0.3217, row-8 0.5201; below 0.1: row-1 and row-4.
    rows = [f"row-{i}" for i in range(1, 9)]
    assert heldout_ids(rows, 0.1) == {"row-1", "row-4"}
    assert heldout_ids(list(reversed(rows)), 0.1) == {"row-1", "row-4"}  # order does not matter
    # path-a 0.9672, path-b 0.2956: none below 0.1, so the lowest hash (path-b) is held back
    assert heldout_ids(["path-a", "path-b"], 0.1) == {"path-b"}
    # 0.99 would take both; the highest hash (path-a) always trains
    assert heldout_ids(["path-a", "path-b"], 0.99) == {"path-b"}
    assert heldout_ids(["alone"], 0.5) == set()
    assert heldout_ids(rows, 0.0) == set()


def test_trains_scores_held_out_steps_and_loads_back(tiny_model, tmp_path, log):
    rows = [_row(f"row-{i}", good=i % 2 == 0) for i in range(1, 7)]  # row-1, row-4 held out
    ctx = _context(
        rows, tiny_model, tmp_path, log, trl={"max_steps": 3, "learning_rate": 1e-2, "per_device_train_batch_size": 2}
    )
    trainer = build_trainer(ctx)
    assert len(trainer.train_dataset) == 4
    assert sorted(r["label_id"] for r in trainer.heldout) == ["row-1", "row-4"]
    metrics = run_training(trainer, ctx.output_dir)
    assert metrics["global_step"] == 3 and math.isfinite(metrics["train_loss"])
    assert metrics["prm_heldout_steps"] == 4.0  # two held-out rows of two steps
    # row-1's second step is the only bad one; the other three are good
    assert {"prm_heldout_mean_good", "prm_heldout_mean_bad"} <= set(metrics)
    held_lines = [line for line in log.lines if line.startswith("prm held-out")]
    assert len(held_lines) == 4 and "row-1 step 2: label bad" in " ".join(held_lines)
    # the metrics are the logged steps' accuracy and means (the lines round scores to 3 decimals)
    logged = [(line.split("label ")[1].startswith("good"), float(line.rsplit(" ", 1)[1])) for line in held_lines]
    good = [s for is_good, s in logged if is_good]
    assert metrics["prm_heldout_mean_good"] == pytest.approx(sum(good) / 3, abs=1e-3)
    assert metrics["prm_heldout_mean_bad"] == pytest.approx(logged[1][1], abs=1e-3)  # row-1 step 2
    assert metrics["prm_heldout_accuracy"] == sum((s > 0.5) == g for g, s in logged) / 4

    scorer = StepScorer.load(ctx.output_dir, device="cpu")
    scores = scorer.score_steps(PROMPT, rows[0]["completions"])
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)
    # the saved folder holds the trained head: it scores as the model in memory does
    in_memory = StepScorer(trainer.model.to("cpu"), trainer.processing_class)
    assert scores == pytest.approx(in_memory.score_steps(PROMPT, rows[0]["completions"]), abs=1e-5)
    completions = [
        f"{SEARCH}\n\n{OBSERVATION}\n\n<answer> Paris </answer>",
        [
            {"role": "assistant", "content": SEARCH},
            {"role": "user", "content": OBSERVATION},
            {"role": "assistant", "content": "<answer> banana </answer>"},
        ],
        "no steps at all",
    ]
    per_step = step_rewards(scorer, [PROMPT] * 3, completions)
    assert [len(s) for s in per_step] == [2, 2, 1]
    # the message list joins into the same text as the string, so its first step scores the same
    assert per_step[1][0] == pytest.approx(per_step[0][0], abs=1e-5)
    rewards = prm_reward(scorer)([PROMPT] * 3, completions)
    assert rewards == pytest.approx([min(s) for s in per_step], abs=1e-5)
    assert prm_reward(scorer, "last")([PROMPT], completions[:1]) == pytest.approx([per_step[0][-1]], abs=1e-5)


def test_completions_split_into_the_exports_steps():
    text = f"{SEARCH}\n\n{OBSERVATION}\n\n<reason>so</reason><answer> Paris </answer>"
    # the search step keeps its observation, as step_labels' completions do
    assert split_steps(text) == [f"{SEARCH}\n\n{OBSERVATION}", "<reason>so</reason><answer> Paris </answer>"]
    assert split_steps("<search> a </search><search> b </search> tail") == [
        "<search> a </search>",
        "<search> b </search>",
        "tail",
    ]
    assert split_steps("  free text  ") == ["free text"]


def test_over_max_length_drops_whole_trailing_steps_and_logs(tiny_model, tmp_path, log):
    tok = load_tokenizer(tiny_model)
    steps = ["one two three", "four five six", "seven eight nine"]
    row = {"label_id": "long", "prompt": "Q: count", "completions": steps, "labels": [True, False, True]}
    prompt = tok("Q: count")["input_ids"]
    lengths = [len(tok(s, add_special_tokens=False)["input_ids"]) + 1 for s in steps]
    # room for the whole prompt and the first two steps, one token short of the third
    limit = len(prompt) + lengths[0] + lengths[1] + lengths[2] - 1
    trainer = build_trainer(_context([row], tiny_model, tmp_path, log, options={"max_length": limit}))
    feature = trainer.train_dataset[0]
    assert len(feature["input_ids"]) == len(prompt) + lengths[0] + lengths[1]
    assert [label for label in feature["labels"] if label != -100] == [1, 0]
    assert any("truncated 1 of 1 rows" in line and "1 lost trailing steps" in line for line in log.lines)


def test_a_row_whose_labels_do_not_match_its_steps_is_named(tiny_model, tmp_path, log):
    rows = [_row("fine", True), {**_row("broken-row", True), "labels": [True]}]
    with pytest.raises(ValueError, match="broken-row.*1 labels for 2 steps"):
        build_trainer(_context(rows, tiny_model, tmp_path, log))


def test_lora_trains_the_head_and_the_scorer_loads_the_adapter(tiny_model, tmp_path, log):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    rows = [_row(f"row-{i}", good=i % 2 == 0) for i in range(1, 4)]
    ctx = _context(rows, tiny_model, tmp_path, log, peft_config=lora)
    trainer = build_trainer(ctx)
    assert trainer.model.peft_config["default"].task_type == "TOKEN_CLS"
    run_training(trainer, ctx.output_dir)
    assert (Path(ctx.output_dir) / "adapter_config.json").is_file()
    scores = StepScorer.load(ctx.output_dir, device="cpu").score_steps(PROMPT, ["a step", "another"])
    in_memory = StepScorer(trainer.model.to("cpu"), trainer.processing_class)
    assert scores == pytest.approx(in_memory.score_steps(PROMPT, ["a step", "another"]), abs=1e-5)
