"""A trainer callback that fails a run once, as a lost worker does (retry and resume tests)."""

from __future__ import annotations

from transformers import TrainerCallback


class FailOnce(TrainerCallback):
    """Raises once, right after the first checkpoint is saved, like a worker lost mid-run."""

    def __init__(self):
        self.failed = False

    def on_save(self, args, state, control, **kwargs):
        if not self.failed:
            self.failed = True
            raise RuntimeError("worker lost")
