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
    # only the assistant turns train. TRL keeps a row's first max_length tokens and drops a row whose
    # completion that cuts off entirely, without a word: at 1024, 187 of 199 answer steps (and 196
    # of 403 query steps) of an R3-RAG build on the seeded world were dropped or cut (its step prompts
    # run to 1,534 tokens), and the trained model searched but never answered. 2048 holds them.
    # TRL's default batch of 8 as 4 micro-batches of 2: the same gradient per step, a quarter of the
    # activations resident (docs/training.md, "Speed and memory").
    defaults={"completion_only_loss": True, "max_length": 2048, **MICRO_BATCH},
)
