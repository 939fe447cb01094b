"""Parameters of ingestion: which datasets, how their questions split into partitions, which corpus.

Sections of the build config (``flows/config.py``) kept beside the loaders and the partition rule
they parameterise (``tasks/data/partitions.py``, ``tasks/data/jsonl.py``). Unknown keys are
refused so a typo in a YAML file is an error that names the key.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from ragfactory.schemas.config import Section
from ragfactory.tasks.data.jsonl import MAX_PASSAGE_CHARS
from ragfactory.tasks.data.partitions import PartitionRule
from ragfactory.warehouse.store import folder_name_problem

DatasetFormat = Literal["hotpotqa", "2wikimultihopqa", "musique", "bamboogle", "flashrag", "world"]
Partition = Literal["train", "valid", "test"]
_RULE = PartitionRule()


class SharesConfig(Section):
    """Shares of a dataset's questions that land in each partition (tasks/data/partitions.py)."""

    train: float = Field(_RULE.train, ge=0.0, le=1.0, description="Share of questions builds expand")
    valid: float = Field(_RULE.valid, ge=0.0, le=1.0, description="Share kept for model selection")
    test: float = Field(_RULE.test, ge=0.0, le=1.0, description="Share held out for evaluation")

    def model_post_init(self, context: Any, /) -> None:
        if abs(self.train + self.valid + self.test - 1.0) > 1e-9:
            raise ValueError(
                f"partition shares must sum to 1, got train={self.train} valid={self.valid} test={self.test}"
            )


class DatasetConfig(Section):
    name: str = Field(description="Dataset name written to questions.dataset")
    format: DatasetFormat | None = Field(None, description="Row layout; defaults to the name when it is a known format")
    path: str = Field(
        "bundled",
        description="A JSONL file, or 'bundled' for the sample shipped with ragfactory",
    )
    split: str = "dev"
    limit: int | None = Field(None, ge=1, description="Keep the first N good rows of the file")
    partition: Literal["hash", "train", "valid", "test"] | None = Field(
        None,
        description="'hash': by a hash of the question id and the shares; 'train', 'valid' or "
        "'test': every question of this file (a dataset shipped as separate train and dev files, "
        "or an evaluation-only set); default 'test' for partitions.eval_only, else 'hash'",
    )
    shares: SharesConfig | None = Field(None, description="This dataset's shares; default partitions.shares")

    @field_validator("name")
    @classmethod
    def _kept_by_its_folder(cls, name: str) -> str:
        """A name its ``dataset=<name>`` partition folder keeps as it is (``folder_name_problem``),
        so ``questions.dataset`` never reads back a name no config names."""
        if (problem := folder_name_problem(name, "dataset", "a dataset name")) is None:
            return name
        raise PydanticCustomError("dataset_name", problem)

    @property
    def resolved_format(self) -> str:
        return self.format or self.name


class PartitionConfig(Section):
    """How questions are split into train / valid / test (held out from every build)."""

    seed: int = Field(_RULE.seed, description="Hash seed of the partitions; keep it fixed for a warehouse")
    shares: SharesConfig = Field(default_factory=SharesConfig, description="Default shares of every dataset")
    eval_only: list[str] = Field(
        default_factory=lambda: ["bamboogle"],
        description="Datasets (names or formats) whose every question is test: Bamboogle's 125 "
        "questions are an evaluation set in the literature",
    )

    def rule_for(self, dataset: DatasetConfig) -> PartitionRule:
        """The partition rule of one configured dataset."""
        mode = dataset.partition
        if mode is None:
            evaluation_only = {dataset.name, dataset.resolved_format} & set(self.eval_only)
            mode = "test" if evaluation_only else "hash"
        shares = dataset.shares or self.shares
        return PartitionRule(
            seed=self.seed,
            train=shares.train,
            valid=shares.valid,
            test=shares.test,
            fixed=None if mode == "hash" else mode,
        )


class CorpusConfig(Section):
    from_datasets: bool = Field(
        True, description="Add the datasets' context paragraphs (deduplicated by title and text)"
    )
    files: list[str] = Field(
        default_factory=list,
        description='Search-R1 / FlashRAG corpora: JSONL with {"id", "contents": "\\"Title\\"\\ntext"}',
    )
    max_passage_chars: int = Field(
        MAX_PASSAGE_CHARS,
        ge=1,
        description="A passage (title and text) longer than this goes to "
        "rejects, naming its id and size: 32 x the dense retriever's ~1,000-char window, above the "
        "longest bundled paragraph (7,849); a JSONL line over 128 bytes per char of it is not read",
    )
