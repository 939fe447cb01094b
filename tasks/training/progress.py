"""A TrainerCallback that reports training progress through a logger it is given.

transformers draws a progress bar already; these lines go to the orchestrator's log (a Prefect
run logger in the flow), so a dashboard shows the step, the loss, the learning rate and the time
the remaining steps take at the pace of those done so far (ETA), then GRPO's mean reward and KL
when the trainer logs them; the dashboard draws a run's curves from these lines
(``ragfactory/dashboard/curves.py``).
"""

from __future__ import annotations

import logging
import time

from transformers import TrainerCallback


class LossLogger(TrainerCallback):
    """Logs ``step i/n (p%) loss … lr … eta …`` (then ``reward …`` and ``kl …`` when logged) at
    every trainer log event (``logging_steps``)."""

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter, prefix: str = ""):
        self.logger = logger
        self.prefix = prefix
        self.losses: list[tuple[int, float]] = []
        self.started: tuple[float, int] | None = None  # (monotonic time, step) when training began

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = (time.monotonic(), state.global_step)
        self.logger.info("%straining from step %d to %d", self.prefix, state.global_step, state.max_steps)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" not in logs:
            return
        self.losses.append((state.global_step, float(logs["loss"])))
        total = max(state.max_steps, 1)
        extra = "".join(f" {key} {float(logs[key]):.4g}" for key in ("reward", "kl") if key in logs)
        self.logger.info(
            "%sstep %d/%d (%.0f%%) loss %.4f lr %.2e eta %s%s",
            self.prefix,
            state.global_step,
            total,
            100.0 * state.global_step / total,
            float(logs["loss"]),
            float(logs.get("learning_rate", 0.0)),
            self.eta(state.global_step, total),
            extra,
        )

    def eta(self, step: int, total: int, now: float | None = None) -> str:
        """The remaining steps' time at the pace of the steps done since training began
        (a resumed run counts only its own), as ``1h02m03s``; ``?`` before a step is done."""
        if self.started is None or step <= self.started[1]:
            return "?"
        began, first = self.started
        seconds = round((total - step) * ((now or time.monotonic()) - began) / (step - first))
        hours, rest = divmod(max(seconds, 0), 3600)
        return (f"{hours}h" if hours else "") + f"{rest // 60:02d}m{rest % 60:02d}s"
