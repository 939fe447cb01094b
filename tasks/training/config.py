"""Parameters of the trainers that are not TRL's own: peft LoRA adapters, and what a run reads.

``LoraSection`` is the ``lora`` section of the train flow's parameters (``flows/config.py``),
beside the trainers that turn it into a ``peft.LoraConfig`` (``tasks/training/trainers.py``);
``TrainingRequest`` is the part of those parameters a training run reads (``runs.py``).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import Field

from ragfactory.schemas.config import Section
from ragfactory.tasks.training.methods import TRAIN_METHODS

# the registered methods (``tasks/training/methods/``), in registration order
TrainMethod = Literal[TRAIN_METHODS]  # type: ignore[valid-type]


class LoraSection(Section):
    """peft LoRA adapters instead of full fine-tuning."""

    enabled: bool = Field(False, description="Train LoRA adapters (peft) rather than every weight")
    r: int = Field(16, ge=1, description="Adapter rank; 16 is the peft/TRL example default")
    alpha: int = Field(32, ge=1, description="Scaling; 2 x r as in the TRL examples")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="TRL examples' adapter dropout")
    target_modules: str | list[str] = Field(
        "all-linear", description="Modules that get adapters; every linear layer by default"
    )


class TrainingRequest(Protocol):
    """What one training run reads of the train flow's parameters (``flows/config.py``
    ``TrainConfig``): the runner takes the request, not the flow's model, so training imports no
    flow layer."""

    method: TrainMethod
    run_id: str | None
    more_run_ids: list[str]
    parquet: str | None
    task: str | None
    base_model: str
    trl: dict[str, Any]
    lora: LoraSection
    rewards: list[str]
    save_steps: int
    seed: int
    output_dir: str | None
    options: dict[str, Any]

    @property
    def lineage_name(self) -> str: ...

    @property
    def export_table(self) -> str: ...

    def training_fields(self) -> dict: ...
