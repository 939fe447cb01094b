"""GRPO: TRL's ``GRPOTrainer`` on the ``grpo_prompts`` export, scored by the reward functions the
run names (``tasks/training/rewards.py``); ``task`` selects answer or planner prompts, and SEPR
reads the planner rows' ``gold_plan``."""

from ragfactory.tasks.training.methods.spec import MethodSpec

SPEC = MethodSpec(
    "grpo",
    "grpo_prompts",
    ("prompt", "golden_answers"),
    optional=("task", "gold_plan"),
    options=("prm_model", "prm_aggregate"),  # only the prm reward's
    config="trl:GRPOConfig",
    trainer="trl:GRPOTrainer",
    rewarded=True,
    vllm=True,
    # Two generations is the smallest group with a relative advantage; enough for CPU smoke runs.
    defaults={"num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 256},
)
