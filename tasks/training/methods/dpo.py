"""Direct preference optimisation: TRL's ``DPOTrainer`` on the ``preference_pairs`` export
(``prompt``, ``chosen``, ``rejected``)."""

from ragfactory.tasks.training.methods.spec import MICRO_BATCH, MethodSpec

SPEC = MethodSpec(
    "dpo",
    "preference_pairs",
    ("prompt", "chosen", "rejected"),
    config="trl:DPOConfig",
    trainer="trl:DPOTrainer",
    # max_length as SFT's (the pairs' prompts are the same conversations); micro-batches as SFT's; the
    # reference log-probs computed once before training from the initial weights, so no reference
    # copy is held and no step runs a reference forward.
    defaults={"max_length": 1024, "precompute_ref_log_probs": True, **MICRO_BATCH},
)
