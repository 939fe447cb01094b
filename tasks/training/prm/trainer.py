"""The PRM trainer: a two-label token-classification head on ``transformers.Trainer``.

TRL 1.16 dropped its ``PRMTrainer``; this trains the same model the way it did: the base causal
LM with ``AutoModelForTokenClassification`` (``num_labels=2``) on the layout of ``encoding.py``.
Truncated and left-out rows are counted and logged; after training the held-out rows
(``heldout.py``) are scored into the metrics, one log line per held-out step. Its spec is
``tasks/training/methods/prm.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from transformers import Trainer

from ragfactory.tasks.training.methods import MethodContext
from ragfactory.tasks.training.prm.encoding import ID2LABEL, checked_row, encode_steps
from ragfactory.tasks.training.prm.heldout import heldout_ids, heldout_metrics
from ragfactory.tasks.training.prm.scoring import load_tokenizer, step_probabilities


@dataclass(frozen=True)
class PRMOptions:
    heldout_fraction: float = 0.1
    max_length: int = 1024

    def __post_init__(self):
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise ValueError(f"prm: heldout_fraction must be in [0, 1), got {self.heldout_fraction}")
        if self.max_length < 2:
            raise ValueError(f"prm: max_length must be >= 2, got {self.max_length}")


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
        logger.warning(
            "prm: max_length %d truncated %d of %d rows: %d had the prompt cut from the left, "
            "%d lost trailing steps, %d are left out (not one step fits); first: %r",
            max_length,
            len(truncated),
            len(rows),
            len(cut),
            len(shortened),
            len(dropped),
            (dropped or shortened or cut)[0],
        )
    return features


def prm_options(ctx: MethodContext) -> PRMOptions:
    """The method's options; a ``max_length`` in the TRL overrides counts too (options win)."""
    settings = {k: ctx.options[k] for k in ("heldout_fraction", "max_length") if k in ctx.options}
    if "max_length" in ctx.trl:
        settings.setdefault("max_length", ctx.trl["max_length"])
    return PRMOptions(**settings)


def token_classifier(path: str, tokenizer, peft_config=None):
    """The base model with a fresh good/bad head; LoRA adapters (TOKEN_CLS) when configured."""
    from transformers import AutoModelForTokenClassification

    from ragfactory.tasks.training.trainers import weights_dtype

    dtype = weights_dtype()
    model = AutoModelForTokenClassification.from_pretrained(
        str(path), num_labels=2, id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()}, dtype=dtype
    )
    model.config.pad_token_id = tokenizer.pad_token_id
    if peft_config is None:
        return model
    from peft import get_peft_model

    # TOKEN_CLS makes peft train and save the new ``score`` head beside the adapters.
    return get_peft_model(model, replace(peft_config, task_type="TOKEN_CLS"))


class PRMTrainer(Trainer):
    """``transformers.Trainer`` that scores the held-out rows after training (into the metrics)."""

    def __init__(self, *args, heldout: Sequence[dict] = (), max_length: int | None = None, prm_logger=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.heldout, self.prm_max_length, self.prm_logger = list(heldout), max_length, prm_logger

    def train(self, *args, **kwargs):
        result = super().train(*args, **kwargs)
        result.metrics.update(self.score_heldout())
        return result

    def score_heldout(self) -> dict[str, float]:
        tokenizer = self.processing_class
        encoded = [
            encode_steps(tokenizer, r["prompt"], r["completions"], None, self.prm_max_length) for r in self.heldout
        ]
        # scored as the saved model will score: without the mixed-precision forward training ran under
        model = self.accelerator.unwrap_model(self.model, keep_fp32_wrapper=False)
        scores = (
            step_probabilities(model, encoded, tokenizer.pad_token_id, self.args.per_device_eval_batch_size)
            if encoded
            else []
        )
        logger = self.prm_logger if self.is_world_process_zero() else None
        for row, row_scores in zip(self.heldout, scores):
            for i, (label, score) in enumerate(zip(row["labels"], row_scores), start=1):
                if logger is not None:
                    logger.info(
                        "prm held-out %s step %d: label %s, P(good) %.3f",
                        row["label_id"],
                        i,
                        "good" if label else "bad",
                        score,
                    )
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
    ctx.logger.info("prm: %d rows train (%d after truncation), %d held out", len(train_rows), len(features), len(held))
    return PRMTrainer(
        model=model,
        args=args,
        train_dataset=datasets.Dataset.from_list(features),
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        callbacks=list(ctx.callbacks),
        heldout=[r for r in rows if r["label_id"] in held],
        max_length=options.max_length,
        prm_logger=ctx.logger,
    )
