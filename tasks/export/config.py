"""Parameters of the export stage: how search trees become training data, and decontamination.

The ``export`` section of the build config (``flows/config.py``), gathering the exporters' own
parameters: those several strategies share beside their code in ``tasks/export/``, and the
sections each strategy's exporters declare in its folder (``tasks/export/registry.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, create_model

from ragfactory.schemas.config import Section
from ragfactory.tasks.data.config import DatasetConfig, Partition
from ragfactory.tasks.export.contamination import ContaminationConfig
from ragfactory.tasks.export.dpo import DpoConfig
from ragfactory.tasks.export.ngrams import NgramConfig
from ragfactory.tasks.export.registry import EXPORTS
from ragfactory.tasks.export.sft import SftConfig

_CONTAMINATION = ContaminationConfig()


class DecontaminationConfig(Section):
    """Which evaluation questions training exports are checked against, and how
    (tasks/export/contamination.py)."""

    mode: Literal["drop", "flag", "off"] = Field(
        _CONTAMINATION.mode,
        description="drop: contaminated rows are left out of the export; flag: kept "
        "and recorded; off: no check. Either way the matches land in the contamination table",
    )
    against: list[Partition] = Field(
        default_factory=lambda: ["valid", "test"],
        description="Partitions of the warehouse's questions (every dataset) held out from training",
    )
    eval_files: list[DatasetConfig] = Field(
        default_factory=list,
        description="Further evaluation sets to keep out of training: a JSONL file "
        "(name, format, path) or a bundled dataset (path: bundled)",
    )
    ngram: int = Field(_CONTAMINATION.ngram.n, ge=1, le=64, description="Words in a shared n-gram that flags")
    max_ngram_questions: int = Field(
        _CONTAMINATION.ngram.max_questions,
        ge=2,
        description="An n-gram in more distinct questions than this is a template and flags nothing",
    )
    embedding: bool = Field(_CONTAMINATION.embedding, description="Flag embedding nearest neighbours too")
    embedder: str = Field("all-MiniLM-L6-v2", description="sentence-transformers model of the embedding stage")
    cosine: float = Field(
        _CONTAMINATION.cosine,
        gt=0.0,
        le=1.0,
        description="Cosine at or above which the nearest evaluation question is a match (0.8 with a judge)",
    )
    judge: bool = Field(
        _CONTAMINATION.judge, description="Ask the judge LLM role 'same question?' about embedding-only matches"
    )

    def params(self) -> ContaminationConfig:
        ngram = NgramConfig(n=self.ngram, max_questions=self.max_ngram_questions)
        return ContaminationConfig(
            mode=self.mode, ngram=ngram, embedding=self.embedding, cosine=self.cosine, judge=self.judge
        )


class ExportSettings(Section):
    """How search trees become training data (the settings several strategies' exporters share;
    ``ExportConfig`` adds the sections the strategies declare, and decontamination)."""

    sft: SftConfig = Field(default_factory=SftConfig, description="Best-chain SFT examples")
    dpo: DpoConfig = Field(default_factory=DpoConfig, description="Sibling preference pairs")
    # None keeps every chain, as before: the filter needs gold paragraphs, which not every dataset has
    require_gold_recall: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Keep only SFT chains whose searches found at least this fraction "
        "of the question's gold supporting paragraphs (tasks/export/gold_recall.py); skipped chains are named "
        "in export_skips",
    )


ExportConfig = create_model(
    "ExportConfig",
    __base__=ExportSettings,
    __module__=__name__,
    __doc__="How search trees become training data.",
    **{
        name: (model, Field(default_factory=model, description=description))
        for name, (description, model) in EXPORTS.export_configs().items()
    },
    decontamination=(
        DecontaminationConfig,
        Field(
            default_factory=DecontaminationConfig,
            description="Training rows whose question matches a held-out or evaluation question",
        ),
    ),
)
