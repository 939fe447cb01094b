"""Parameters of the search stage: which strategies expand which questions, and the sharding.

The ``search`` section of the build config (``flows/config.py``); each strategy's own parameters
live beside it (``tasks/search/<strategy>/``), with the papers' defaults, and appear here as
``search.<name>``, one field per registered strategy in registration order
(``tasks/search/registry.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, create_model, field_validator, model_validator

from ragfactory.schemas.config import Section
from ragfactory.tasks.data.config import Partition
from ragfactory.tasks.search.registry import STRATEGIES


class SearchSettings(Section):
    """Which strategies expand which questions, and how questions are sharded (without the
    strategies' own sections, which ``SearchConfig`` adds)."""

    strategies: list[str] = Field(
        default_factory=list,
        description="Search strategies to run, by registered name ("
        + ", ".join(s.name for s in STRATEGIES)
        + "; tasks/search/registry.py); none: ingest and index only",
    )
    datasets: list[str] | None = Field(
        None, description="Datasets whose questions are expanded; default: every dataset built"
    )
    partition: Partition = Field(
        "train",
        description="Partition whose questions are expanded; anything but train overlaps "
        "the questions evaluations hold out (warned about and recorded in runs.warnings)",
    )
    questions_per_dataset: int | None = Field(
        None,
        ge=1,
        description="Expand the first N questions of each dataset's partition, in "
        "sample_key (hash) order: a uniform sample that a larger N extends",
    )
    question_ids: list[str] | dict[str, list[str]] | None = Field(
        None,
        description="Expand exactly these questions, in this order, instead of a sample "
        "(questions_per_dataset): one list for every strategy, or a list per strategy name (a "
        "strategy not named takes the sample); each must be ingested and in `partition`",
    )
    select: Literal["sample", "frontier"] = Field(
        "sample",
        description="sample: questions_per_dataset (or question_ids) every run; frontier: "
        "the next questions_per_night questions in sample_key order that no earlier run of the "
        "strategy with the same policy engine and model expanded, so each night extends the last",
    )
    questions_per_night: int | None = Field(
        None, ge=1, description="With select: frontier, how many new questions each strategy expands per run"
    )
    shard_size: int = Field(16, ge=1, description="Questions per shard task: the unit of retries and of failure")
    max_concurrent_shards: int = Field(
        4,
        ge=1,
        description="Shards a worker expands at once; their engine calls merge into shared "
        "batches (an engine's decode step costs about the same for 4 rows as for 8)",
    )

    @field_validator("strategies")
    @classmethod
    def _registered(cls, names: list[str]) -> list[str]:
        known = STRATEGIES.names()
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"search.strategies: unknown {unknown}; registered strategies: {known}")
        return names

    @model_validator(mode="after")
    def _listed_strategies_run(self) -> SearchSettings:
        if isinstance(self.question_ids, dict):
            unknown = sorted(set(self.question_ids) - set(self.strategies))
            if unknown:
                raise ValueError(f"search.question_ids names strategies the build does not run: {unknown}")
        return self

    @model_validator(mode="after")
    def _frontier_is_sized(self) -> SearchConfig:
        if self.select == "frontier" and self.questions_per_night is None:
            raise ValueError("search.select is 'frontier' but search.questions_per_night is not set")
        if self.select != "frontier" and self.questions_per_night is not None:
            raise ValueError("search.questions_per_night is set but search.select is not 'frontier'")
        if self.select == "frontier" and self.question_ids is not None:
            raise ValueError("search.select 'frontier' picks its own questions; drop search.question_ids")
        return self

    def listed_questions(self, strategy: str) -> list[str] | None:
        """The questions ``question_ids`` lists for ``strategy``; None: take the sample."""
        if isinstance(self.question_ids, dict):
            return self.question_ids.get(strategy)
        return self.question_ids


# one ``search.<name>`` field per registered strategy, after the settings above
SearchConfig = create_model(
    "SearchConfig",
    __base__=SearchSettings,
    __module__=__name__,
    __doc__="Which strategies expand which questions, and how questions are sharded.",
    **{s.name: (s.config_type, Field(default_factory=s.config_type, description=s.description)) for s in STRATEGIES},
)
