"""A step-level process reward model (PRM): token classification on step separators.

The ``step_labels`` export is TRL's stepwise-supervision layout: ``prompt``, ``completions`` (the
steps of one root-to-leaf path, in order) and ``labels`` (one bool per step). The PRM learns
P(good) of each step, read at the separator after it. Its parts:

1. ``encoding.py``: a row's tokens, its labels on the separators, truncation to ``max_length``;
2. ``trainer.py``: the token-classification trainer (``build_trainer``, the method's spec in
   ``tasks/training/methods/prm.py``), which holds rows back and scores them after training;
3. ``heldout.py``: which rows are held back, and the metrics their scores give;
4. ``scoring.py``: a trained PRM's inference (``StepScorer``);
5. ``reward.py``: the trained PRM as GRPO's ``prm`` reward.
"""
