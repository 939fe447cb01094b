"""Supervised fine-tuning: TRL's ``SFTTrainer`` on the ``sft_examples`` conversations.

Each assistant turn becomes a prompt/completion row (``data.sft_prompt_completions``) and
``completion_only_loss`` masks every prompt token, so only assistant turns carry loss.
"""

from ragfactory.tasks.training.methods.spec import MICRO_BATCH, MethodSpec

SPEC = MethodSpec(
    "sft",
    "sft_examples",
    ("messages",),
    config="trl:SFTConfig",
    trainer="trl:SFTTrainer",
    prepare="ragfactory.tasks.training.data:sft_prompt_completions",
    # only the assistant turns train; 1024 tokens hold the demo's longest conversation
    # TRL's default batch of 8 as 4 micro-batches of 2: the same gradient per step, a quarter of the
    # activations resident (docs/training.md, "Speed and memory").
    defaults={"completion_only_loss": True, "max_length": 1024, **MICRO_BATCH},
)
