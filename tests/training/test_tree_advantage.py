"""Tree-advantage training (TreePS-RAG Eq. 3) on a tiny random Llama: the token layout, the
objective worked by hand, one step moving each step's log-probability the way its advantage
says, and no gradient reaching prompt or observation tokens."""

from __future__ import annotations

import math

import pytest
import torch

from ragfactory.tasks.training.methods import MethodContext
from ragfactory.tasks.training.runs import run_training
from ragfactory.tasks.training.trainers import load_model
from ragfactory.tasks.training.tree_advantage import (
    build_trainer,
    pad_batch,
    step_pieces,
    token_logps,
    tokenize_row,
    tree_advantage_loss,
)

SEARCH = "<search>jaws director</search>"
OBSERVATION = "\n\n<information>Doc 1(Title: Jaws) Jaws is a 1975 film by Steven Spielberg.</information>\n\n"
ANSWER = "<answer>Steven Spielberg</answer>"
RESPONSE = SEARCH + OBSERVATION + ANSWER


def row(a_search: float, a_answer: float) -> dict:
    answer_at = len(SEARCH) + len(OBSERVATION)
    return {
        "trajectory_id": "t1",
        "is_sampled": True,
        "prompt": [{"role": "user", "content": "Who directed Jaws?"}],
        "response": RESPONSE,
        "step_spans": [
            {"node_id": "n1", "char_start": 0, "char_end": len(SEARCH), "advantage": a_search},
            {"node_id": "n2", "char_start": answer_at, "char_end": len(RESPONSE), "advantage": a_answer},
        ],
        "observation_spans": [{"char_start": len(SEARCH), "char_end": answer_at}],
    }


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return load_model(tiny_model)[1]


def test_pieces_follow_the_spans():
    assert step_pieces(row(0.5, -0.25)) == [(SEARCH, 0.5), (OBSERVATION, None), (ANSWER, -0.25)]


def test_overlapping_spans_name_the_trajectory_and_node():
    bad = row(1.0, 1.0)
    bad["step_spans"][1]["char_start"] = 3
    with pytest.raises(ValueError, match=r"trajectory 't1'.*node 'n2'"):
        step_pieces(bad)


def test_step_tokens_carry_their_advantage_and_observations_are_masked(tokenizer):
    features = tokenize_row(row(0.5, -0.25), tokenizer, max_length=1024)
    prompt = tokenizer.apply_chat_template(row(0, 0)["prompt"], add_generation_prompt=True, tokenize=False)
    # the chat the expansion sent: the observation is a user turn between two assistant turns
    # (SmolLM2's ChatML), not the single-sequence response's "\n\n" separators
    between = (
        "<|im_end|>\n<|im_start|>user\n"
        "<information>Doc 1(Title: Jaws) Jaws is a 1975 film by Steven Spielberg.</information>"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    n_prompt, n_search, n_between, n_answer = (
        len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in (prompt, SEARCH, between, ANSWER)
    )
    assert len(features["input_ids"]) == n_prompt + n_search + n_between + n_answer
    assert features["loss_mask"] == [0] * n_prompt + [1] * n_search + [0] * n_between + [1] * n_answer
    assert features["advantages"] == [0.0] * n_prompt + [0.5] * n_search + [0.0] * n_between + [-0.25] * n_answer
    # the pieces are tokenised apart: the model's tokens are exactly those of its own text
    start = n_prompt + n_search + n_between
    assert tokenizer.decode(features["input_ids"][start:]) == ANSWER
    # and the whole is the chat template's rendering of the trajectory's turns
    chat = [*row(0, 0)["prompt"], {"role": "assistant", "content": SEARCH}]
    chat += [{"role": "user", "content": OBSERVATION.strip("\n")}, {"role": "assistant", "content": ANSWER}]
    whole = tokenizer.apply_chat_template(chat, tokenize=False)
    assert tokenizer.decode(features["input_ids"]) == whole.removesuffix("<|im_end|>\n")


def test_an_observation_after_the_last_step_is_left_out(tokenizer):
    cut = row(1.0, 1.0)
    cut["response"] = SEARCH + OBSERVATION
    cut["step_spans"] = cut["step_spans"][:1]
    features = tokenize_row(cut, tokenizer, max_length=1024)
    assert tokenizer.decode(features["input_ids"]).endswith("<|im_start|>assistant\n" + SEARCH)


def test_a_step_past_max_length_is_dropped_whole(tokenizer):
    full = tokenize_row(row(1.0, 1.0), tokenizer, max_length=1024)
    answer = len(tokenizer(ANSWER, add_special_tokens=False)["input_ids"])
    cut = tokenize_row(row(1.0, 1.0), tokenizer, max_length=len(full["input_ids"]) - 1)
    assert len(cut["input_ids"]) == len(full["input_ids"]) - answer
    assert tokenize_row(row(1.0, 1.0), tokenizer, max_length=3) is None


def test_objective_worked_by_hand():
    # Two trained tokens (positions 1 and 2; position 0 only predicts).
    # Token 1: log π_θ - log π_old = ln 1.5, A = +1: ρ = 1.5 is clipped to 1.2, min(1.5, 1.2) = 1.2.
    # Token 2: log π_θ - log π_old = ln 0.5, A = -1: min(-0.5, clip(0.5) = 0.8 · -1) = -0.8.
    # β = 0: loss = -(1.2 - 0.8) / 2 = -0.2.
    # β = 0.1: KL_1 = 1/1.5 + ln 1.5 - 1 = 0.0721318, KL_2 = 2 - ln 2 - 1 = 0.3068528;
    # loss = -((1.2 - 0.00721318) + (-0.8 - 0.03068528)) / 2 = -0.18105077.
    batch = {
        "advantages": torch.tensor([[0.0, 1.0, -1.0]]),
        "loss_mask": torch.tensor([[0.0, 1.0, 1.0]]),
        "old_logps": torch.tensor([[0.0, -1.0, -2.0]]),
    }
    logps = torch.tensor([[-1.0 + math.log(1.5), -2.0 + math.log(0.5)]])
    assert tree_advantage_loss(logps, batch, 0.2, 0.0).item() == pytest.approx(-0.2)
    assert tree_advantage_loss(logps, batch, 0.2, 0.1).item() == pytest.approx(-0.18105077, abs=1e-7)


def test_no_gradient_reaches_prompt_or_observation_tokens(tiny_model, tokenizer):
    model, _ = load_model(tiny_model)
    features = tokenize_row(row(1.0, -1.0), tokenizer, max_length=1024)
    batch = pad_batch([features], tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"]).logits
    batch["old_logps"] = torch.cat([torch.zeros(1, 1), token_logps(logits, batch["input_ids"])], dim=1)
    leaf = logits.clone().requires_grad_(True)
    tree_advantage_loss(token_logps(leaf, batch["input_ids"]), batch, 0.2, 0.001).backward()
    # row t of the logits predicts token t+1: its gradient is zero exactly when token t+1 is masked
    touched = leaf.grad[0, :-1].abs().sum(-1) > 0
    assert touched.tolist() == [bool(m) for m in features["loss_mask"][1:]]
    assert leaf.grad[0, -1].abs().sum() == 0


def step_logps(model, features, pieces: tuple[int, int]) -> float:
    ids = torch.tensor([features["input_ids"]])
    with torch.no_grad():
        logps = token_logps(model(input_ids=ids).logits, ids)[0]
    start, end = pieces
    return float(logps[start - 1 : end - 1].sum())


def test_one_step_raises_the_good_step_and_lowers_the_bad_one(tiny_model, tokenizer, tmp_path, log):
    trajectory = row(1.0, -1.0)
    features = tokenize_row(trajectory, tokenizer, max_length=1024)
    mask = features["loss_mask"]
    first = mask.index(1)
    search = (first, first + mask[first:].index(0))
    answer = (len(mask) - mask[::-1].index(0), len(mask))
    base, _ = load_model(tiny_model)
    before = step_logps(base, features, search), step_logps(base, features, answer)
    ctx = MethodContext(
        rows=[trajectory, {**trajectory, "is_sampled": False}],
        model_path=tiny_model,
        output_dir=str(tmp_path / "out"),
        save_steps=10,
        seed=0,
        logger=log,
        # float32: the loss below is exact arithmetic (bf16 autocast moves ρ off 1 by ~1e-4)
        trl={"max_steps": 1, "learning_rate": 1e-3, "optim": "sgd", "per_device_train_batch_size": 1, "bf16": False},
    )
    trainer = build_trainer(ctx)
    assert len(trainer.train_dataset) == 1  # the row not sampled for training is left out
    metrics = run_training(trainer, ctx.output_dir)
    # at the first step ρ = 1 and the KL term is 0: loss = -(n_search·1 - n_answer·1) / (n_search + n_answer)
    n_search, n_answer = search[1] - search[0], answer[1] - answer[0]
    assert metrics["final_loss"] == pytest.approx(-(n_search - n_answer) / (n_search + n_answer), abs=1e-6)
    trained, _ = load_model(ctx.output_dir)
    after = step_logps(trained, features, search), step_logps(trained, features, answer)
    assert after[0] > before[0]
    assert after[1] < before[1]


def test_the_frozen_base_scores_a_batch_as_the_pass_before_training_does(tiny_model, tokenizer, tmp_path, log):
    rows = [row(1.0, -1.0), {**row(0.5, 0.5), "trajectory_id": "t2", "prompt": [{"role": "user", "content": "Jaws?"}]}]
    trainers = {}
    for precompute in (True, False):
        trl = {"max_steps": 1, "per_device_train_batch_size": 2, "bf16": False, "precompute_base_logps": precompute}
        ctx = MethodContext(rows, tiny_model, str(tmp_path / str(precompute)), trl, 10, 0, logger=log)
        trainers[precompute] = build_trainer(ctx)
    features = list(trainers[True].train_dataset)
    assert "old_logps" not in trainers[False].train_dataset.column_names
    batch = pad_batch(features, tokenizer.pad_token_id)
    lazy = trainers[False]._base_logps(trainers[False].model, batch)
    real = batch["attention_mask"].bool()
    assert lazy.shape == batch["old_logps"].shape
    assert torch.allclose(lazy[real], batch["old_logps"][real], atol=1e-5)
    assert (lazy[:, 0] == 0).all() and lazy[real].min() < -1  # a random model's tokens are unlikely


@pytest.mark.parametrize("old_policy", ["base", "current"])
def test_old_policy_current_keeps_the_ratio_at_one_wherever_the_model_has_moved(tiny_model, tmp_path, log, old_policy):
    trajectory = row(1.0, -0.5)
    trl = {"max_steps": 1, "per_device_train_batch_size": 1, "bf16": False, "beta": 0.0, "old_policy": old_policy}
    trainer = build_trainer(MethodContext([trajectory], tiny_model, str(tmp_path / "out"), trl, 10, 0, logger=log))
    with torch.no_grad():  # the model moves away from the base its reference copy keeps
        for parameter in trainer.model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    # on the model's device, as the training loop hands it over (a CUDA worker's too)
    batch = trainer._prepare_inputs(pad_batch(list(trainer.train_dataset), trainer.processing_class.pad_token_id))
    loss = trainer.compute_loss(trainer.model, batch).item()
    mask, advantages = batch["loss_mask"][0, 1:], batch["advantages"][0, 1:]
    # ρ = 1 on every token: −Σ A / Σ mask, the advantages' mean over the trained tokens
    unclipped = -(advantages * mask).sum().item() / mask.sum().item()
    if old_policy == "current":
        assert loss == pytest.approx(unclipped, abs=1e-6)
    else:  # the moved model's ratios to the base are not 1
        assert abs(loss - unclipped) > 1e-3


def test_an_unknown_old_policy_is_refused_naming_the_field():
    from ragfactory.tasks.training.tree_advantage import TreeAdvantageConfig

    with pytest.raises(
        ValueError, match=r"TreeAdvantageConfig.old_policy must be one of \('base', 'current'\), got 'latest'"
    ):
        TreeAdvantageConfig(output_dir="/tmp/x", old_policy="latest")
