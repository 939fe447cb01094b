"""Rewards: what scores an answer, a plan or a rollout, and the one signature a trainer calls.

A reward function is TRL's: ``reward(prompts, completions, **columns) -> list[float]``.

1. ``prompts`` and ``completions`` are the batch's, one per row, each a string or a list of chat
   messages (``functions.completion_text`` reads either);
2. ``columns`` are the dataset's other columns by name, one value per row (``golden_answers``,
   ``gold_plan``, ``question_id``), plus what a rollout adds (``retrieved``); a reward reads the
   ones it needs as keyword arguments and ignores the rest; a missing column it needs is a
   ``ValueError`` naming it;
3. it returns one float per completion, in order; a completion it cannot read scores 0.0, it
   never raises for the model's output;
4. its ``__name__`` is what TRL logs (``rewards/<name>/mean``).

The stock ones (``answer_em``, ``answer_f1``, ``format``) are plain functions
(``functions.py``). One that needs a service (SEPR's plan scorer, a relevance judge, a trained
step reward model) is declared as a factory, ``factory(context) -> reward``, built once per
run from a ``RewardContext``; a strategy declares its factories in its folder's ``training``
module (``REWARDS``, ``tasks/search/strategy.py``), a training method in its spec
(``tasks/training/methods/``), and the training run looks the names it was given up in both
(``tasks/training/rewards.py``).

The metrics beneath them live here too: answer EM / F1 / cover-EM (``answer.py``), SEPR
(``sepr.py``) with its embedding cache, and verl's rule-based score (``verl_reward.py``, in verl's
own signature: verl loads that file by path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

RewardFunc = Callable[..., list[float]]


class RewardContext(Protocol):
    """What a reward factory may read of the training run (``tasks/training/methods/spec.py``'s
    ``MethodContext`` is one)."""

    rows: list[dict]  # the export rows the run trains on
    warehouse: Any  # the warehouse (caches, the build's questions and run), or None
    run_id: str | None  # the build whose export this is (None: a parquet file)
    rewards: list[str]  # the reward names the run asked for
    options: dict[str, Any]  # the method's settings; rewards read theirs (``metric``, ``prm_model``)

    def judge_generator(self) -> Any:
        """The build's judge role (else its policy) as a generator."""

    def question_texts(self) -> dict[str, str]:
        """``question_id -> question`` of the rows' questions, from the warehouse."""


RewardFactory = Callable[[RewardContext], RewardFunc]
