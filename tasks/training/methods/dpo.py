"""Direct preference optimisation: TRL's ``DPOTrainer`` on the ``preference_pairs`` export
(``prompt``, ``chosen``, ``rejected``)."""

from ragfactory.tasks.training.methods.spec import MethodSpec

SPEC = MethodSpec(
    "dpo",
    "preference_pairs",
    ("prompt", "chosen", "rejected"),
    config="trl:DPOConfig",
    trainer="trl:DPOTrainer",
    # max_length as SFT's (the pairs' prompts are the same conversations). TRL's batch of 8 as 8
    # micro-batches of one pair: a pair is two sequences, and their logits over a 49k vocabulary
    # are most of a step's memory; the same gradient (the same loss, to the digit, in
    # benchmarks/train_vs_trl.py), no padding to the longest pair of a batch, and no slower on CPU.
    # Activations recomputed in the backward pass (activation checkpointing); the reference
    # log-probs computed once before training, a pair at a time, from the initial weights, so no
    # reference copy is held and no step runs a reference forward. On the embedded model the
    # peak fell from 5.6 GB (2 x 4, no checkpointing) to 4.3 GB.
    defaults={
        "max_length": 1024,
        "precompute_ref_log_probs": True,
        "precompute_ref_batch_size": 1,
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 8,
        "activation_checkpointing": True,
    },
)
