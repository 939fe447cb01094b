"""Parameters of the trainers that are not TRL's own: peft LoRA adapters.

The ``lora`` section of the train flow's parameters (``flows/config.py``), beside the trainers
that turn it into a ``peft.LoraConfig`` (``tasks/training/trainers.py``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoraSection(Section):
    """peft LoRA adapters instead of full fine-tuning."""

    enabled: bool = Field(False, description="Train LoRA adapters (peft) rather than every weight")
    r: int = Field(16, ge=1, description="Adapter rank; 16 is the peft/TRL example default")
    alpha: int = Field(32, ge=1, description="Scaling; 2 x r as in the TRL examples")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="TRL examples' adapter dropout")
    target_modules: str | list[str] = Field(
        "all-linear", description="Modules that get adapters; every linear layer by default"
    )
