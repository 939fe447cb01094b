"""Agentic GRPO: TRL's GRPO with multi-turn rollouts against the build's retriever
(``tasks/training/agentic.py``)."""

from ragfactory.tasks.training.methods.spec import REWARD_OPTIONS, MethodSpec

SPEC = MethodSpec(
    "grpo-agentic",
    "grpo_prompts",
    ("prompt", "golden_answers", "question_id"),
    optional=("task",),
    options=("max_turns", "top_k", "retriever", "sources", "grammar", "turn_tokens", *REWARD_OPTIONS),
    config="trl:GRPOConfig",
    module="ragfactory.tasks.training.agentic",
    rewarded=True,
    # GRPO's: the smallest group with a relative advantage, enough for CPU smoke runs
    defaults={"num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 256},
)
