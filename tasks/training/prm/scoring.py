"""A trained PRM's inference: P(good) = softmax(logits)[1] at each step's separator.

``step_probabilities`` scores encoded rows in right-padded batches without gradient (the trainer
scores its held-out rows with it); ``StepScorer`` loads a trained model (full weights or LoRA
adapters) and scores (prompt, steps) paths laid out as in training (``encoding.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from ragfactory.tasks.training.prm.encoding import GOOD, EncodedRow, encode_steps


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
            chunk = encoded[start : start + batch_size]
            width = max(len(e.input_ids) for e in chunk)
            ids = torch.tensor([e.input_ids + [pad_id] * (width - len(e.input_ids)) for e in chunk])
            mask = torch.tensor([[1] * len(e.input_ids) + [0] * (width - len(e.input_ids)) for e in chunk])
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            good = logits.float().softmax(-1)[..., GOOD].cpu()
            scores += [[float(good[i, p]) for p in e.positions] for i, e in enumerate(chunk)]
    model.train(was_training)
    return scores


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
