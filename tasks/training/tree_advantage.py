"""Tree-advantage policy optimisation on TreePS-RAG trajectories (§2.3 and Eq. 3).

"The node advantage A(n_i) is broadcast to all language model-generated tokens (r_i, a_i)
within that step … we apply a loss mask to the observation tokens." Eq. 3 (Appendix B) is
PPO's clipped surrogate with those token advantages, averaged over every trained token of the
batch, minus β·KL to a reference:

    J(θ) = 1/Σ|y_i| · Σ_i Σ_t [ min(ρ_t A_t, clip(ρ_t, 1-ε, 1+ε) A_t) - β·KL_t ]
    ρ_t  = π_θ(y_t | x, y_<t) / π_old(y_t | x, y_<t)
    KL_t = exp(log π_ref - log π_θ) - (log π_ref - log π_θ) - 1   (k3, as GRPO estimates it)

Offline, as this trainer runs it, the trajectories are a build's and π_ref is the base model
the training starts from. A frozen copy of the base scores each batch as it comes (the base with
its adapter disabled, under LoRA), so a run of a few steps scores only the rows it trains;
``precompute_base_logps`` scores every row in one pass before the first step instead. π_old is
``old_policy``'s:

- ``base`` (the default): the policy that grew the trees, taken to be the base. At the first step
  ρ = 1 and the gradient is Σ A_t ∇log π_θ(y_t): a step with A > 0 gets likelier, one with A < 0
  less likely; the clip then holds every token within [1 - ε, 1 + ε] of the base's probability
  (its gradient stops there), as PPO's minibatches hold a policy near the one that sampled.
- ``current``: the policy at the step that trains the row (its log-probs detached), as GRPO's
  single iteration takes it: ρ = 1 at every step, the gradient is always Σ A_t ∇log π_θ(y_t),
  and only the KL to the base holds the policy back. This is for trees another policy grew (a
  larger model, the seeded world's teacher engine): a step the base finds unlikely is exactly
  what it should learn, and the clip at the base would stop it at 1 + ε times an unlikely
  probability.

The paper trains online: every step regrows trees with the current policy and recomputes A(n).
Here the trees are fixed (one build, many steps); regrowing them is a new build whose policy
is ``latest:<name>`` of this lineage, then another ``tree-advantage`` run on its export. The
blind spot of ``base``: when the build's policy was not the base (another engine, another
checkpoint), π_old is only close to the sampling policy, and ρ drifts from 1 by that gap.

A row that carries token ids (``prompt_token_ids``, ``completion_token_ids``, ``loss_mask`` and
``step_token_spans``, spliced from the calls that sampled it: tasks/llm/splice.py) is trained
on exactly those ids, never re-tokenised: the tokens trained on are the tokens sampled, each
step's sampled tokens carry its advantage and mask 1, template and observation tokens mask 0.
A row without them (an export before schema 9, an engine that gave no ids, another tokenizer's
ids) falls back to text, and the log says how many did. That fallback rebuilds the chat the
expansion sent (``steps.py``: each step an assistant turn, each observation a user turn) from
``response`` and its spans, through the tokenizer's chat template, so it trains the layout the
spliced ids have and the strategy's evaluation mode runs, not the single-sequence ``response``
itself; it tokenises in pieces: the prompt with the assistant's opening, then each step's text,
and between steps the template's text around the observation, as an engine sampled each step
after its prompt.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from trl.trainer.base_config import _BaseConfig
from trl.trainer.base_trainer import _BaseTrainer

from ragfactory.tasks.llm.tokenizer_id import tokenizer_fingerprint
from ragfactory.tasks.training.methods import MethodContext

OLD_POLICIES = ("base", "current")
IGNORED = ("prompt", "response", "step_spans", "observation_spans", "is_sampled")


@dataclass
class TreeAdvantageConfig(_BaseConfig):
    """TRL-style config of the trainer; ε and β as in Eq. 3 (β from Table 5)."""

    epsilon: float = field(default=0.2, metadata={"help": "PPO clip range (verl's default)"})
    beta: float = field(default=0.001, metadata={"help": "KL coefficient (Table 5)"})
    max_length: int = field(default=1024, metadata={"help": "Tokens per row; whole steps past it are dropped"})
    precompute_base_logps: bool = field(
        default=False,
        metadata={
            "help": "The base's log-probs of every row in one pass before the first step, instead of a frozen "
            "copy of the base scoring each batch as it comes (a run that sees a few of a build's rows "
            "would score them all)"
        },
    )
    old_policy: str = field(
        default="base",
        metadata={
            "help": "π_old of the ratio: base (the trees' own policy) or current (the policy at each step, "
            "detached: for trees another policy grew)"
        },
    )
    remove_unused_columns: bool = field(default=False, metadata={"help": "The trainer reads its own columns"})

    def __post_init__(self):
        if self.old_policy not in OLD_POLICIES:
            raise ValueError(f"TreeAdvantageConfig.old_policy must be one of {OLD_POLICIES}, got {self.old_policy!r}")
        super().__post_init__()


def step_pieces(row: dict) -> list[tuple[str, float | None]]:
    """The response as (text, advantage) pieces in order; None marks text the model did not write."""
    response, pieces, at = row["response"], [], 0
    for span in sorted(row["step_spans"], key=lambda s: s["char_start"]):
        start, end = span["char_start"], span["char_end"]
        if start < at or end > len(response) or end <= start:
            raise ValueError(
                f"trajectory {row.get('trajectory_id')!r}: step span [{start}, {end}) of node "
                f"{span.get('node_id')!r} overlaps another or leaves the response"
            )
        if start > at:
            pieces.append((response[at:start], None))
        pieces.append((response[start:end], float(span["advantage"])))
        at = end
    if at < len(response):
        pieces.append((response[at:], None))
    return pieces


def chat_pieces(row: dict, tokenizer) -> list[tuple[str, float | None]]:
    """The trajectory as the chat its expansion sent, in (text, advantage) pieces: the prompt
    through the chat template with the assistant's opening, each step's text with its advantage,
    and between two steps the template's text around the observation's user turn (None: text the
    model did not write). The observation after the last step (a leaf cut at depth D) is left
    out: nothing is trained after it."""
    chat = [dict(message) for message in row["prompt"]]
    done = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    pieces, steps = [(done, None)], step_pieces(row)
    for at, (text, advantage) in enumerate(steps):
        if advantage is not None:
            pieces.append((text, advantage))
            chat.append({"role": "assistant", "content": text})
            done += text
        elif at + 1 < len(steps):
            chat.append({"role": "user", "content": text.removeprefix("\n\n").removesuffix("\n\n")})
            rendered = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            if not rendered.startswith(done):
                raise ValueError(
                    f"trajectory {row.get('trajectory_id')!r}: the tokenizer's chat template does not "
                    "extend the chat turn by turn, so its steps cannot be trained from text"
                )
            pieces.append((rendered[len(done) :], None))
            done = rendered
    return pieces


def tokenize_row(row: dict, tokenizer, max_length: int) -> dict | None:
    """``input_ids``, per-token ``advantages`` and ``loss_mask`` of one trajectory, tokenised from
    ``chat_pieces`` piece by piece (a step's tokens are those of its own text, as an engine samples
    them after the template's opening); None when not even its first step fits in ``max_length``."""
    ids, advantages, mask = [], [], []
    for text, advantage in chat_pieces(row, tokenizer):
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) + len(piece) > max_length:
            break
        ids += piece
        advantages += [advantage or 0.0] * len(piece)
        mask += [int(advantage is not None)] * len(piece)
    if not any(mask):
        return None
    return {"input_ids": ids, "advantages": advantages, "loss_mask": mask}


def has_token_ids(row: dict, fingerprint: str | None) -> bool:
    """Whether a row carries token ids this tokenizer can train on (same fingerprint)."""
    return (
        row.get("completion_token_ids") is not None
        and row.get("prompt_token_ids") is not None
        and row.get("step_token_spans") is not None
        and row.get("tokenizer_fingerprint") == fingerprint
    )


def token_row(row: dict, max_length: int) -> dict | None:
    """``input_ids``, per-token ``advantages`` and ``loss_mask`` of a row from its own token ids
    (``prompt_token_ids`` then ``completion_token_ids``); None when not even its first step fits."""
    prompt, completion = list(row["prompt_token_ids"]), list(row["completion_token_ids"])
    ids = prompt + completion
    mask = [0] * len(prompt) + [int(m) for m in row["loss_mask"]]
    advantages = [0.0] * len(ids)
    end = 0  # whole steps only: cut after the last step that fits
    for span, step in zip(row["step_token_spans"], row["step_spans"]):
        start, stop = len(prompt) + span["token_start"], len(prompt) + span["token_end"]
        if stop > max_length:
            break
        advantages[start:stop] = [float(step["advantage"])] * (stop - start)
        end = stop
    if not any(mask[:end]):
        return None
    return {"input_ids": ids[:end], "advantages": advantages[:end], "loss_mask": mask[:end]}


def trajectory_features(rows: list[dict], tokenizer, max_length: int, logger=None) -> list[dict]:
    """The sampled trajectories (``is_sampled``) as features: from their token ids where they
    carry this tokenizer's, else tokenised from text (counted in the log); rows whose first step
    does not fit are dropped and counted in the log."""
    sampled = [row for row in rows if row.get("is_sampled", True)]
    fingerprint = tokenizer_fingerprint(tokenizer)
    exact = [has_token_ids(row, fingerprint) for row in sampled]
    features = [
        token_row(row, max_length) if ok else tokenize_row(row, tokenizer, max_length)
        for row, ok in zip(sampled, exact)
    ]
    if logger is not None and not all(exact):
        logger.warning(
            "tree-advantage: %d of %d trajectories carry no token ids of this tokenizer (an "
            "export before schema 9, or an engine that gave none); they are re-tokenised from "
            "text",
            exact.count(False),
            len(sampled),
        )
    kept = [f for f in features if f is not None]
    if logger is not None and len(kept) < len(sampled):
        logger.warning(
            "tree-advantage: %d of %d trajectories do not fit max_length %d and are left out",
            len(sampled) - len(kept),
            len(sampled),
            max_length,
        )
    if not kept:
        raise ValueError(
            f"no trajectory to train on: {len(rows)} rows, {len(sampled)} sampled, none fits max_length {max_length}"
        )
    return kept


def pad_batch(features: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded tensors of a batch; padding has mask 0."""
    width = max(len(f["input_ids"]) for f in features)

    def column(name, fill, dtype):
        return torch.tensor([f[name] + [fill] * (width - len(f[name])) for f in features], dtype=dtype)

    batch = {
        "input_ids": column("input_ids", pad_id, torch.long),
        "attention_mask": torch.tensor(
            [[1] * len(f["input_ids"]) + [0] * (width - len(f["input_ids"])) for f in features], dtype=torch.long
        ),
        "advantages": column("advantages", 0.0, torch.float32),
        "loss_mask": column("loss_mask", 0, torch.float32),
    }
    if "old_logps" in features[0]:
        batch["old_logps"] = column("old_logps", 0.0, torch.float32)
    return batch


def token_logps(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log π(y_t | y_<t) for t = 1..L-1, shape (batch, L-1)."""
    logps = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logps.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def with_first(logps: torch.Tensor) -> torch.Tensor:
    """``token_logps``' (batch, L-1) with a 0 for position 0, aligned with the input ids."""
    return torch.cat([torch.zeros_like(logps[:, :1]), logps], dim=1)


def tree_advantage_loss(logps: torch.Tensor, batch: dict, epsilon: float, beta: float) -> torch.Tensor:
    """−J(θ) of Eq. 3 for a batch: ``logps`` from ``token_logps``; the batch's advantages, masks,
    π_old's log-probs (``old_logps``) and π_ref's (``ref_logps``, else π_old's) are aligned with
    the tokens, so position t predicts token t+1."""
    advantages, mask = batch["advantages"][:, 1:], batch["loss_mask"][:, 1:]
    old = batch["old_logps"][:, 1:]
    ref = batch.get("ref_logps", batch["old_logps"])[:, 1:]
    ratio = torch.exp(logps - old)
    surrogate = torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * advantages)
    log_ref_ratio = ref - logps
    kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1
    per_token = -(surrogate - beta * kl) * mask
    return per_token.sum() / mask.sum().clamp(min=1.0)


class TreeAdvantageTrainer(_BaseTrainer):
    """Eq. 3 on fixed trajectories, on TRL's trainer base (checkpoints, logging, resume, LoRA)."""

    _tag_names = ["trl", "tree-advantage"]
    _name = "TreeAdvantage"

    def __init__(
        self,
        model,
        args: TreeAdvantageConfig,
        train_dataset,
        processing_class,
        callbacks=(),
        peft_config=None,
        logger=None,
    ):
        features = trajectory_features(list(train_dataset), processing_class, args.max_length, logger)
        reference = None
        if args.precompute_base_logps:
            add_old_logps(model, features, processing_class.pad_token_id, args.per_device_train_batch_size)
        elif peft_config is None:  # with an adapter, the base is the model with it disabled
            reference = copy.deepcopy(model).eval().requires_grad_(False)
        if peft_config is not None:
            from peft import get_peft_model

            model = get_peft_model(model, peft_config)
        import datasets

        super().__init__(
            model=model,
            args=args,
            train_dataset=datasets.Dataset.from_list(features),
            processing_class=processing_class,
            callbacks=list(callbacks),
            data_collator=lambda rows: pad_batch(rows, processing_class.pad_token_id),
        )
        self.reference = reference

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        base = inputs.pop("old_logps") if "old_logps" in inputs else self._base_logps(model, inputs)
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        logps = token_logps(outputs.logits, inputs["input_ids"])
        old = base if self.args.old_policy == "base" else with_first(logps.detach())
        batch = {**inputs, "old_logps": old, "ref_logps": base}
        loss = tree_advantage_loss(logps, batch, self.args.epsilon, self.args.beta)
        return (loss, outputs) if return_outputs else loss

    @torch.no_grad()
    def _base_logps(self, model, inputs) -> torch.Tensor:
        """The base's log-probabilities of a batch's tokens (0 at position 0): the frozen copy's,
        or the model's with its adapter disabled."""
        ids, attention = inputs["input_ids"], inputs["attention_mask"]
        if self.reference is None:
            with self.accelerator.unwrap_model(model).disable_adapter():
                logits = model(input_ids=ids, attention_mask=attention).logits
        else:
            logits = self.reference.to(ids.device)(input_ids=ids, attention_mask=attention).logits
        return with_first(token_logps(logits, ids))


@torch.no_grad()
def add_old_logps(model, features: list[dict], pad_id: int, batch_size: int) -> None:
    """The base's log-probability of every token (0 at position 0), written into each feature
    as ``old_logps`` (π_old under ``old_policy: base``, and π_ref)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    for start in range(0, len(features), batch_size):
        chunk = features[start : start + batch_size]
        batch = pad_batch(chunk, pad_id)
        logits = model(
            input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)
        ).logits
        logps = token_logps(logits, batch["input_ids"].to(device)).cpu()
        for feature, row in zip(chunk, logps):
            feature["old_logps"] = [0.0] + row[: len(feature["input_ids"]) - 1].tolist()
    model.train(was_training)


def build_trainer(ctx: MethodContext) -> TreeAdvantageTrainer:
    """The method's trainer on a ``trajectories`` export (its spec: ``methods/tree_advantage.py``)."""
    from ragfactory.tasks.training.trainers import load_model, trl_args

    model, tokenizer = load_model(ctx.model_path)
    args = trl_args("tree-advantage", ctx.output_dir, ctx.save_steps, ctx.seed, ctx.trl)
    return TreeAdvantageTrainer(model, args, ctx.rows, tokenizer, ctx.callbacks, ctx.peft_config, ctx.logger)
