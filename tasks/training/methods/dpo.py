"""Direct preference optimisation: TRL's ``DPOTrainer`` on the ``preference_pairs`` export
(``prompt``, ``chosen``, ``rejected``)."""

from ragfactory.tasks.training.methods.spec import MethodSpec

SPEC = MethodSpec(
    "dpo", "preference_pairs", ("prompt", "chosen", "rejected"),
    config="trl:DPOConfig", trainer="trl:DPOTrainer",
    defaults={"max_length": 1024},  # as SFT's: the pairs' prompts are the same conversations
)
