"""Supervised fine-tuning: TRL's ``SFTTrainer`` on the ``sft_examples`` conversations.

Each assistant turn becomes a prompt/completion row (``data.sft_prompt_completions``) and
``completion_only_loss`` masks every prompt token, so only assistant turns carry loss.
"""

from ragfactory.tasks.training.methods.spec import MethodSpec

SPEC = MethodSpec(
    "sft", "sft_examples", ("messages",),
    config="trl:SFTConfig", trainer="trl:SFTTrainer",
    prepare="ragfactory.tasks.training.data:sft_prompt_completions",
    # only the assistant turns train; 1024 tokens hold the demo's longest conversation
    defaults={"completion_only_loss": True, "max_length": 1024},
)
