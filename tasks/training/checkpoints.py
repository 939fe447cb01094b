"""No checkpoint at a training's last step: ``run_training`` saves the model itself.

A checkpoint is there so that a retried run resumes where the last attempt stopped
(``save_steps``); transformers also writes one when the last step is done (the model, and the
optimizer's state: twice the weights' bytes for Adam), which ``run_training`` deletes a moment
later, once ``save_model`` has written the trained weights. On SmolLM2-135M that last checkpoint
is 1.6 GB written and removed for nothing: 4.4 s of the slow evaluation test's 96 (docs/benchmarks.md,
"The slow evaluation test against the code before the CPU work"). A worker
lost between the last step and ``save_model`` resumes from the previous checkpoint instead.
"""

from __future__ import annotations

from transformers import TrainerCallback


class NoFinalCheckpoint(TrainerCallback):
    """Cancels the save transformers asks for when the last step is done (``max_steps``); the
    checkpoints of earlier steps are written as ``save_steps`` says. Added after the trainer's own
    flow callback, whose ``on_step_end`` sets the save this one clears."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= state.max_steps:
            control.should_save = False
        return control
