"""A step reward model on the ``step_labels`` export: token classification on step separators
(``tasks/training/prm/``); what it trains scores GRPO completions as the ``prm`` reward."""

from ragfactory.tasks.rewards import RewardContext, RewardFunc
from ragfactory.tasks.training.methods.spec import MethodSpec


def prm_reward(ctx: RewardContext) -> RewardFunc:
    """The trained PRM the run's options name, its step scores aggregated per completion."""
    from ragfactory.tasks.training.prm.reward import registered_prm_reward

    return registered_prm_reward(ctx.warehouse, ctx.options)


SPEC = MethodSpec(
    "prm",
    "step_labels",
    ("label_id", "prompt", "completions", "labels"),
    options=("heldout_fraction", "max_length"),
    module="ragfactory.tasks.training.prm.trainer",
    defaults={"per_device_train_batch_size": 2},  # a CPU worker's batch
    rewards={"prm": prm_reward},
)
