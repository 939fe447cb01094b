"""A step-level process reward model (PRM): token classification on step separators.

The ``step_labels`` export is TRL's stepwise-supervision layout: ``prompt``, ``completions`` (the
steps of one root-to-leaf path, in order) and ``labels`` (one bool per step). TRL 1.16 dropped its
``PRMTrainer``; this module trains the same model the way it did, on ``transformers.Trainer``:

    input_ids = prompt · step_1 · SEP · step_2 · SEP · … · step_k · SEP
    labels    = -100 everywhere, but label(step_i) (1 good, 0 bad) on the LAST token of each SEP

with a two-label token-classification head (``AutoModelForTokenClassification``, ``num_labels=2``)
on the base causal LM. The separator is ``"\\n"`` as tokenised alone (SmolLM2: one token, 198;
TRL's ``PRMConfig.step_separator`` default); a step's score is P(good) = softmax(logits)[1] at it.
Each piece is tokenised on its own and the ids concatenated (the prompt with the tokenizer's own
special tokens, steps and separators without), so a step's tokens never merge with its
neighbours' and training and scoring see the same ids.

Over ``max_length`` (default 1024): trailing steps are dropped whole while the kept steps leave
less than ``min(len(prompt), max_length // 2)`` tokens for the prompt, then the prompt is cut
from the left (the Search-R1 prompt ends with the question, which this keeps). A kept step always
keeps its label; a row where not even its first step fits is left out. Both are counted and logged.

Held-out rows: a row is held back when sha256(label_id) read as a fraction of 2**64 is below
``heldout_fraction`` (default 0.1); with two rows or more at least one is held back (the lowest
hash) and at least one trains (the highest). After training, ``PRMTrainer.train`` scores them and
adds ``prm_heldout_accuracy`` (P(good) > 0.5 against the label), ``prm_heldout_steps``,
``prm_heldout_mean_good`` and ``prm_heldout_mean_bad`` to the result's metrics (a mean with no
step to average is left out, never NaN), logging one line per held-out step.

As a reward (``prm_reward``), a completion is split into the export's steps: a step ends at
``</information>`` (a search step with its observation, as ``step_labels`` joins them:
text ``\\n\\n<information>…</information>``), at ``</answer>``, or at ``</search>`` with no
``<information>`` after it; each piece is stripped of the blank lines around it (the
``\\n\\n`` Search-R1 puts after an observation) and empty pieces are dropped. A message-list
completion is its contents joined with ``\\n\\n`` first. Text with no boundary is one step.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from transformers import Trainer

from ragfactory.tasks.training.methods import MethodContext

SEPARATOR = "\n"
IGNORE_INDEX = -100
GOOD = 1
ID2LABEL = {0: "bad", 1: "good"}
STEP_END = re.compile(r"</information>|</answer>|</search>(?!\s*<information>)")
AGGREGATES = {
    "min": min,  # a path is as good as its worst step (PRM best-of-N)
    "last": lambda scores: scores[-1],
    "mean": lambda scores: sum(scores) / len(scores),
}


@dataclass(frozen=True)
class PRMOptions:
    heldout_fraction: float = 0.1
    max_length: int = 1024

    def __post_init__(self):
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise ValueError(f"prm: heldout_fraction must be in [0, 1), got {self.heldout_fraction}")
        if self.max_length < 2:
            raise ValueError(f"prm: max_length must be >= 2, got {self.max_length}")


@dataclass(frozen=True)
class EncodedRow:
    """One row's ids and labels, and where each kept step's score is read."""

    input_ids: list[int]
    labels: list[int]
    positions: list[int]  # the last separator token of each kept step
    steps_dropped: int = 0
    prompt_cut: int = 0


def checked_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's ``label_id``, ``prompt``, ``completions`` and ``labels``, checked against each other."""
    label_id = row.get("label_id")
    missing = [c for c in ("label_id", "prompt", "completions", "labels") if row.get(c) is None]
    if missing:
        raise ValueError(f"step_labels row {label_id!r}: missing {missing}")
    steps, labels = [str(s) for s in row["completions"]], list(row["labels"])
    if len(labels) != len(steps):
        raise ValueError(f"step_labels row {label_id!r}: {len(labels)} labels for {len(steps)} steps")
    if not steps:
        raise ValueError(f"step_labels row {label_id!r}: no step")
    if any(label not in (True, False) for label in labels):
        raise ValueError(f"step_labels row {label_id!r}: labels must be booleans, got {labels}")
    return {"label_id": str(label_id), "prompt": str(row["prompt"]), "completions": steps,
            "labels": [bool(label) for label in labels]}


def separator_ids(tokenizer) -> list[int]:
    return tokenizer(SEPARATOR, add_special_tokens=False)["input_ids"]


def kept_steps(prompt_len: int, step_lens: Sequence[int], max_length: int | None) -> int:
    """How many leading steps fit beside a prompt reserve of min(prompt, max_length // 2) tokens."""
    if max_length is None:
        return len(step_lens)
    budget, total = max_length - min(prompt_len, max_length // 2), 0
    for kept, length in enumerate(step_lens):
        total += length
        if total > budget:
            return kept
    return len(step_lens)


def encode_steps(tokenizer, prompt: str, steps: Sequence[str], labels: Sequence[bool] | None = None,
                 max_length: int | None = None) -> EncodedRow:
    """The module docstring's layout; ``labels`` None (scoring) leaves every label -100."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    separator = separator_ids(tokenizer)
    pieces = [tokenizer(step, add_special_tokens=False)["input_ids"] + separator for step in steps]
    kept = kept_steps(len(prompt_ids), [len(p) for p in pieces], max_length)
    step_total = sum(len(p) for p in pieces[:kept])
    room = len(prompt_ids) if max_length is None else max(0, max_length - step_total)
    cut = max(0, len(prompt_ids) - room)
    ids, tags, positions = list(prompt_ids[cut:]), [IGNORE_INDEX] * (len(prompt_ids) - cut), []
    for i, piece in enumerate(pieces[:kept]):
        ids += piece
        positions.append(len(ids) - 1)
        tags += [IGNORE_INDEX] * (len(piece) - 1) + [IGNORE_INDEX if labels is None else int(labels[i])]
    return EncodedRow(ids, tags, positions, len(steps) - kept, cut)


def split_key(label_id: str) -> float:
    """sha256 of the id, its first 8 bytes as a fraction of 2**64: uniform and stable across runs."""
    return int.from_bytes(hashlib.sha256(label_id.encode("utf-8")).digest()[:8], "big") / 2**64


def heldout_ids(label_ids: Iterable[str], fraction: float) -> set[str]:
    """The label ids held back from training (see the module docstring)."""
    ids = sorted(set(label_ids), key=split_key)
    if len(ids) < 2 or fraction <= 0:
        return set()
    held = {i for i in ids if split_key(i) < fraction} or {ids[0]}
    held.discard(ids[-1])
    return held


def training_features(rows: Sequence[dict], tokenizer, max_length: int, logger) -> list[dict]:
    """``input_ids`` and ``labels`` of the rows; truncations and left-out rows are counted and logged."""
    features, cut, shortened, dropped = [], [], [], []
    for row in rows:
        encoded = encode_steps(tokenizer, row["prompt"], row["completions"], row["labels"], max_length)
        if encoded.prompt_cut:
            cut.append(row["label_id"])
        if not encoded.positions:
            dropped.append(row["label_id"])
            continue
        if encoded.steps_dropped:
            shortened.append(row["label_id"])
        features.append({"input_ids": encoded.input_ids, "labels": encoded.labels})
    if truncated := {*cut, *shortened, *dropped}:
        logger.warning("prm: max_length %d truncated %d of %d rows: %d had the prompt cut from the left, "
                       "%d lost trailing steps, %d are left out (not one step fits); first: %r",
                       max_length, len(truncated), len(rows), len(cut), len(shortened), len(dropped),
                       (dropped or shortened or cut)[0])
    return features


def prm_options(ctx: MethodContext) -> PRMOptions:
    """The method's options; a ``max_length`` in the TRL overrides counts too (options win)."""
    settings = {k: ctx.options[k] for k in ("heldout_fraction", "max_length") if k in ctx.options}
    if "max_length" in ctx.trl:
        settings.setdefault("max_length", ctx.trl["max_length"])
    return PRMOptions(**settings)


def token_classifier(path: str, tokenizer, peft_config=None):
    """The base model with a fresh good/bad head; LoRA adapters (TOKEN_CLS) when configured."""
    import torch
    from transformers import AutoModelForTokenClassification

    from ragfactory.tasks.training.trainers import device_settings

    dtype = torch.bfloat16 if device_settings()["bf16"] else torch.float32
    model = AutoModelForTokenClassification.from_pretrained(
        str(path), num_labels=2, id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()}, dtype=dtype)
    model.config.pad_token_id = tokenizer.pad_token_id
    if peft_config is None:
        return model
    from peft import get_peft_model

    # TOKEN_CLS makes peft train and save the new ``score`` head beside the adapters.
    return get_peft_model(model, replace(peft_config, task_type="TOKEN_CLS"))


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def step_probabilities(model, encoded: Sequence[EncodedRow], pad_id: int, batch_size: int = 8) -> list[list[float]]:
    """P(good) at each kept step's separator, per row (right-padded batches, no gradient)."""
    import torch

    was_training, device, scores = model.training, next(model.parameters()).device, []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start:start + batch_size]
            width = max(len(e.input_ids) for e in chunk)
            ids = torch.tensor([e.input_ids + [pad_id] * (width - len(e.input_ids)) for e in chunk])
            mask = torch.tensor([[1] * len(e.input_ids) + [0] * (width - len(e.input_ids)) for e in chunk])
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            good = logits.float().softmax(-1)[..., GOOD].cpu()
            scores += [[float(good[i, p]) for p in e.positions] for i, e in enumerate(chunk)]
    model.train(was_training)
    return scores


def heldout_metrics(labels: Sequence[Sequence[bool]], scores: Sequence[Sequence[float]]) -> dict[str, float]:
    """Accuracy of P(good) > 0.5 and the mean score of good and of bad steps; steps cut by
    ``max_length`` (no score) are not counted."""
    pairs = [(label, score) for row_labels, row_scores in zip(labels, scores)
             for label, score in zip(row_labels, row_scores)]
    metrics = {"prm_heldout_steps": float(len(pairs))}
    if pairs:
        metrics["prm_heldout_accuracy"] = sum((s > 0.5) == lab for lab, s in pairs) / len(pairs)
    for name, wanted in (("prm_heldout_mean_good", True), ("prm_heldout_mean_bad", False)):
        chosen = [s for lab, s in pairs if lab == wanted]
        if chosen:
            metrics[name] = sum(chosen) / len(chosen)
    return metrics


class PRMTrainer(Trainer):
    """``transformers.Trainer`` that scores the held-out rows after training (into the metrics)."""

    def __init__(self, *args, heldout: Sequence[dict] = (), max_length: int | None = None,
                 prm_logger=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.heldout, self.prm_max_length, self.prm_logger = list(heldout), max_length, prm_logger

    def train(self, *args, **kwargs):
        result = super().train(*args, **kwargs)
        result.metrics.update(self.score_heldout())
        return result

    def score_heldout(self) -> dict[str, float]:
        tokenizer = self.processing_class
        encoded = [encode_steps(tokenizer, r["prompt"], r["completions"], None, self.prm_max_length)
                   for r in self.heldout]
        scores = step_probabilities(self.model, encoded, tokenizer.pad_token_id,
                                    self.args.per_device_eval_batch_size) if encoded else []
        logger = self.prm_logger if self.is_world_process_zero() else None
        for row, row_scores in zip(self.heldout, scores):
            for i, (label, score) in enumerate(zip(row["labels"], row_scores), start=1):
                if logger is not None:
                    logger.info("prm held-out %s step %d: label %s, P(good) %.3f",
                                         row["label_id"], i, "good" if label else "bad", score)
        return heldout_metrics([r["labels"] for r in self.heldout], scores)


def build_trainer(ctx: MethodContext) -> PRMTrainer:
    """The PRM trainer on a ``step_labels`` export (its spec: ``methods/prm.py``)."""
    import datasets
    from transformers import DataCollatorForTokenClassification, set_seed

    from ragfactory.tasks.training.trainers import trl_args

    options = prm_options(ctx)
    rows = [checked_row(row) for row in ctx.rows]
    held = heldout_ids((r["label_id"] for r in rows), options.heldout_fraction)
    train_rows = [r for r in rows if r["label_id"] not in held]
    tokenizer = load_tokenizer(ctx.model_path)
    features = training_features(train_rows, tokenizer, options.max_length, ctx.logger)
    set_seed(ctx.seed)  # the new head's initial weights
    model = token_classifier(ctx.model_path, tokenizer, ctx.peft_config)
    overrides = {k: v for k, v in ctx.trl.items() if k != "max_length"}
    args = trl_args("prm", ctx.output_dir, ctx.save_steps, ctx.seed, overrides)
    ctx.logger.info("prm: %d rows train (%d after truncation), %d held out", len(train_rows),
                    len(features), len(held))
    return PRMTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_list(features),
                      processing_class=tokenizer, data_collator=DataCollatorForTokenClassification(tokenizer),
                      callbacks=list(ctx.callbacks), heldout=[r for r in rows if r["label_id"] in held],
                      max_length=options.max_length, prm_logger=ctx.logger)


class StepScorer:
    """A trained PRM: P(good) of each step of a (prompt, steps) path, laid out as in training."""

    def __init__(self, model, tokenizer, batch_size: int = 8):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size

    @classmethod
    def load(cls, path: str | Path, device: str | None = None, batch_size: int = 8) -> StepScorer:
        """The model ``build_trainer``'s run saved in ``path`` (full weights, or LoRA adapters)."""
        from ragfactory.tasks.llm.device import default_device

        folder = Path(path)
        if (folder / "adapter_config.json").is_file():
            from peft import AutoPeftModelForTokenClassification as Loader
        else:
            from transformers import AutoModelForTokenClassification as Loader
        model = Loader.from_pretrained(str(folder), num_labels=2)
        return cls(model.to(device or default_device()), load_tokenizer(folder), batch_size)

    def score_steps(self, prompt: str, steps: Sequence[str]) -> list[float]:
        """One P(good) per step (no truncation: a scorer sees every step it is asked about)."""
        return self.score_many([(prompt, steps)])[0]

    def score_many(self, items: Iterable[tuple[str, Sequence[str]]]) -> list[list[float]]:
        encoded = [encode_steps(self.tokenizer, prompt, list(steps)) for prompt, steps in items]
        return step_probabilities(self.model, encoded, self.tokenizer.pad_token_id, self.batch_size)


def message_text(value) -> str:
    """A prompt or completion as text: a string, or a message list's contents joined by blank lines."""
    if isinstance(value, str):
        return value
    return "\n\n".join(str(m.get("content") or "") for m in value)


def split_steps(text: str) -> list[str]:
    """The steps of a completion, cut where the export's steps end (module docstring)."""
    steps, start = [], 0
    for match in STEP_END.finditer(text):
        steps.append(text[start:match.end()].strip())
        start = match.end()
    steps.append(text[start:].strip())
    return [s for s in steps if s] or [text.strip()]


class PRMReward:
    """A TRL reward function ``(prompts, completions, **columns) -> list[float]`` from a PRM."""

    def __init__(self, scorer: StepScorer, aggregate: str = "min"):
        if aggregate not in AGGREGATES:
            raise ValueError(f"prm reward: unknown aggregate {aggregate!r}; expected one of {sorted(AGGREGATES)}")
        self.scorer, self.aggregate = scorer, aggregate
        self.__name__ = f"prm_{aggregate}"  # TRL logs a reward under its function's name

    def step_rewards(self, prompts: Sequence, completions: Sequence) -> list[list[float]]:
        """P(good) of every step of every completion."""
        items = [(message_text(p), split_steps(message_text(c))) for p, c in zip(prompts, completions, strict=True)]
        return self.scorer.score_many(items)

    def __call__(self, prompts: Sequence, completions: Sequence, **columns) -> list[float]:
        return [AGGREGATES[self.aggregate](scores) for scores in self.step_rewards(prompts, completions)]


def prm_reward(scorer: StepScorer, aggregate: str = "min") -> PRMReward:
    """The PRM as a reward: one score per completion, its steps' P(good) aggregated."""
    return PRMReward(scorer, aggregate)


def registered_prm_reward(wh, options: Mapping[str, Any]) -> PRMReward:
    """GRPO's ``prm`` reward: the PRM ``options["prm_model"]`` names (a ``models`` id, a folder or
    ``latest:NAME``; default ``latest:prm``, the newest ``prm`` run), its step scores aggregated by
    ``options["prm_aggregate"]`` (default ``min``)."""
    from ragfactory.tasks.training.registry import resolve_model_ref

    ref = resolve_model_ref(wh, str(options.get("prm_model", "latest:prm")))
    return prm_reward(StepScorer.load(ref.load), str(options.get("prm_aggregate", "min")))


def step_rewards(scorer: StepScorer, prompts: Sequence, completions: Sequence) -> list[list[float]]:
    """The per-step scores ``prm_reward`` aggregates."""
    return PRMReward(scorer).step_rewards(prompts, completions)
