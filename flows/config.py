"""The flows' parameters: the build config (YAML) and the train and evaluate parameters.

``BuildConfig``, ``TrainConfig`` and ``EvalConfig`` are the pydantic models Prefect shows as each
flow's run form (``prefect.yaml``); they gather sections that live beside the code they
parameterise: ``tasks/data/config.py`` (datasets, partitions, corpus),
``tasks/retrieval/config.py``, ``tasks/llm/config.py``, ``tasks/search/config.py`` (with each
strategy's config in its folder), ``tasks/export/config.py`` and ``tasks/training/config.py``.
Unknown keys are refused so a typo in a YAML file is an error that names the key, not a silently
ignored setting.

This module sits in ``flows/`` (docs/architecture.md, "The parts and their arrows": flows hold
the flow parameters) but imports no flow:
``flows/__init__.py`` is empty, so the task wrappers that receive these models
(``tasks/expand.py``, ``tasks/train.py``, ...) import it without loading a flow, and without an
import cycle; ``tests/test_layering.py`` counts it as a part of its own, "Flow parameters".
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, Field, ValidationError, model_validator

from ragfactory.flows.config_hash import config_hash
from ragfactory.schemas.config import Section
from ragfactory.schemas.errors import PermanentError
from ragfactory.tasks.data.config import CorpusConfig, DatasetConfig, Partition, PartitionConfig
from ragfactory.tasks.eval.inference import InferenceConfig
from ragfactory.tasks.export.config import ExportConfig
from ragfactory.tasks.llm.config import LLMConfig
from ragfactory.tasks.retrieval.config import RetrievalConfig
from ragfactory.tasks.search.config import SearchConfig
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.training.config import LoraSection, TrainMethod
from ragfactory.tasks.training.methods import COMMON_OPTIONS
from ragfactory.tasks.valuation.config import ValuationSection
from ragfactory.warehouse.runs import default_run_id
from ragfactory.warehouse.store import safe_name


class WarehouseConfig(Section):
    root: str | None = Field(None, description="Warehouse root; default $RAGFACTORY_HOME, else ~/.ragfactory")


class RunnerConfig(Section):
    """Where the expansion shards run (``flows/runner.py``): in the flow's process, or on a Dask
    cluster. Not in the config hash: a shard's rows are the same wherever it ran."""

    kind: Literal["local", "dask"] = Field(
        "local",
        description="local: shards run in the build's process, search.max_concurrent_shards "
        "at a time, sharing one engine; dask: each shard is a task on a Dask cluster's workers, one "
        "engine per worker process",
    )
    address: str | None = Field(
        None,
        description="Scheduler address of a running Dask cluster (tcp://host:8786); unset with "
        "kind dask: a temporary local cluster of `workers` processes, closed when the stage ends",
    )
    workers: int = Field(2, ge=1, description="Worker processes of a temporary local cluster")
    threads_per_worker: int = Field(
        1,
        ge=1,
        description="Shards a worker of a temporary cluster expands at once (they share its engine)",
    )
    preload: list[str] = Field(
        default_factory=list,
        description="Modules the build's process and every worker of a temporary "
        "cluster import before any shard: where plugged engines and retrievers register (start the "
        "workers of a cluster at `address` with `dask worker --preload <module>`)",
    )

    @model_validator(mode="after")
    def _local_takes_no_cluster_settings(self) -> RunnerConfig:
        if self.kind == "local" and self.address:
            raise ValueError("runner.address is set but runner.kind is 'local'; set kind: dask")
        return self


class BuildConfig(Section):
    name: str = "build"
    seed: int = 0
    warehouse: WarehouseConfig = WarehouseConfig()
    datasets: list[DatasetConfig] = Field(default_factory=list)
    partitions: PartitionConfig = Field(
        default_factory=PartitionConfig, description="Train / valid / test partitions of the questions"
    )
    corpus: CorpusConfig = CorpusConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    llm: LLMConfig = Field(default_factory=LLMConfig)
    search: SearchConfig = SearchConfig()
    valuation: ValuationSection = Field(
        default_factory=ValuationSection, description="Monte-Carlo node values of the expanded trees"
    )
    export: ExportConfig = ExportConfig()
    runner: RunnerConfig = Field(default_factory=RunnerConfig, description="Where expansion shards run")
    allow_downloads: bool = Field(
        False,
        description="Let the build fetch models from a model hub; false (default): the build "
        "runs offline (HF_HUB_OFFLINE=1) and every model must be on this machine already",
    )

    @model_validator(mode="after")
    def _valued_strategies_are_searched(self) -> BuildConfig:
        unknown = [s for s in self.valuation.strategies or () if s not in self.search.strategies]
        if unknown:
            raise ValueError(
                f"valuation.strategies lists {unknown}, which search.strategies "
                f"{list(self.search.strategies)} does not expand"
            )
        return self

    def config_hash(self) -> str:
        """A stable hash of everything that shapes the build's outputs; what enters it is one
        rule, written down in ``flows/config_hash.py``."""
        return config_hash(self)

    def run_id(self, night: str | None = None) -> str:
        """The build's run id: its name and config hash, and for a frontier build the night too
        (default today's UTC date: the same config picks new questions each night)."""
        run_id = default_run_id(self.name, self.config_hash())
        if self.search.select != "frontier":
            return run_id
        return safe_name(f"{run_id}-{night or dt.datetime.now(dt.UTC).date().isoformat()}")

    def tree_name(self, strategy: str) -> str:
        """The ``nodes.strategy`` a configured strategy writes (a strategy may name its tree by its settings)."""
        plugin = STRATEGIES.get(strategy)
        return plugin.tree_name(plugin.settings(self.search))

    def with_policy_model(self, model: str) -> BuildConfig:
        """The config with ``llm.policy.model`` set to ``model``."""
        if model == self.llm.policy.model:
            return self
        policy = self.llm.policy.model_copy(update={"model": model})
        return self.model_copy(update={"llm": self.llm.model_copy(update={"policy": policy})})

    def warnings(self) -> list[str]:
        """What a reader of this build's exports must know: it draws on held-out questions."""
        if self.search.partition == "train" or not self.search.strategies:
            return []
        return [
            f"search.partition is {self.search.partition!r}: this build expands questions that "
            "evaluations hold out; a model trained on it is scored on questions it has seen "
            "(evals.is_seen) unless evaluated on another partition"
        ]


class ConfigError(PermanentError, ValueError):
    """A configuration file that cannot be read, is not a mapping, or does not validate."""


def load_build_config(path: str | Path) -> BuildConfig:
    """Read a YAML build config; errors name the file and the offending key.

    An empty file, or one whose document is not a mapping (a list, a bare string), is an error
    rather than a build with every default: a config that says nothing is a mistake (the wrong
    file, a truncated copy), not a request for the defaults.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read config: {_first_line(exc)}") from exc
    if raw is None:
        raise ConfigError(
            f"{path}: the config file is empty; give at least `name` and `datasets` (see configs/demo.yaml)"
        )
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: expected a mapping of settings (name, datasets, search, ...), got a YAML {type(raw).__name__}"
        )
    try:
        return BuildConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"{path}: {problems}") from exc


def _first_line(exc: BaseException) -> str:
    """The error on one line (YAML errors span several: what, where, the offending text)."""
    return " ".join(str(exc).split()) or type(exc).__name__


class TrainConfig(Section):
    """Parameters of the ``train`` flow: what to train, on which export, from which base."""

    method: TrainMethod
    run_id: str | None = Field(None, description="Build run whose export is trained on")
    more_run_ids: list[str] = Field(
        default_factory=list,
        description="Earlier build runs whose exports are trained on too (the "
        "nightly pipeline's window of earlier nights); needs run_id",
    )
    name: str | None = Field(
        None,
        description="Lineage name of the trained model (default: the method); a build's "
        "policy model 'latest:NAME' picks the newest model of that lineage",
    )
    table: str | None = Field(None, description="Export table; default sft_examples / preference_pairs / grpo_prompts")
    parquet: str | None = Field(None, description="A parquet file or folder instead of a run's export")
    task: str | None = Field(
        None,
        description="GRPO: train only the grpo_prompts rows of this task ('qa' answers, "
        "'plan' APEX planner prompts scored by SEPR); default every row",
    )
    base_model: str = Field(
        "embedded", description="A local checkpoint folder, a model id, or 'embedded' (SmolLM2-135M)"
    )
    trl: dict[str, Any] = Field(
        default_factory=dict, description="Overrides of the TRL SFTConfig / DPOConfig / GRPOConfig"
    )
    lora: LoraSection = LoraSection()
    rewards: list[str] = Field(
        default_factory=lambda: ["answer_f1", "format"],
        description="GRPO reward functions: answer_em, answer_f1, format, sepr; grpo-agentic adds "
        "r3_process (R3-RAG's judged relevance x lambda_T)",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Method settings: grpo-agentic max_turns, top_k, retriever, "
        "sources, grammar, turn_tokens, metric; prm heldout_fraction, max_length; the prm reward "
        "prm_model, prm_aggregate; every method trackers (tensorboard, mlflow, wandb; none by default)",
    )
    save_steps: int = Field(50, ge=1, description="Checkpoint every N steps; a retry resumes there")
    seed: int = Field(0, description="Seed of the data order, dropout and any fresh weights")
    output_dir: str | None = Field(
        None, description="Where the model goes; default <root>/artifacts/models/trained/<model_id>"
    )
    warehouse: WarehouseConfig = WarehouseConfig()
    allow_downloads: bool = Field(
        False,
        description="Let the training fetch its base model from a model hub; false (default): it "
        "runs offline and the base must be 'embedded', registered, a local folder or in the local HF cache",
    )

    def model_post_init(self, __context) -> None:
        if (self.run_id is None) == (self.parquet is None):
            raise ValueError("train: give exactly one of run_id (a build's export) or parquet")
        if self.more_run_ids and self.run_id is None:
            raise ValueError("train: more_run_ids adds exports to run_id's; give run_id")
        from ragfactory.tasks.training.methods import check_options

        check_options(self.method, self.options)

    @property
    def lineage_name(self) -> str:
        return self.name or self.method

    @property
    def export_table(self) -> str:
        from ragfactory.tasks.training.methods import METHODS

        return self.table or METHODS[self.method].table

    def training_fields(self) -> dict:
        """The fields that shape the trained weights (not where inputs and outputs live).

        ``options`` counts only when set, so models trained before it existed keep their ids, and
        every method's options (``trackers``) never count: they shape no weight."""
        exclude = {"run_id", "more_run_ids", "parquet", "output_dir", "warehouse", "name", "allow_downloads"}
        options = {k: v for k, v in self.options.items() if k not in COMMON_OPTIONS}
        fields = self.model_dump(mode="json", exclude=exclude | {"options"})
        return fields | {"table": self.export_table} | ({"options": options} if options else {})


def _eval_mode(name: str) -> str:
    """A mode the evaluation knows: a built-in one or one a registered strategy adds."""
    from ragfactory.tasks.eval.runner import check_modes

    return check_modes([name])[0]


EvalMode = Annotated[str, AfterValidator(_eval_mode)]
EVAL_MODES: tuple[str, ...] = ("agentic", "direct", "rag")  # the default modes of an evaluation
_INFERENCE = InferenceConfig()


class EvalConfig(Section):
    """Parameters of the ``evaluate`` flow: which model answers which questions, and how."""

    model: str = Field(
        "embedded",
        description="'embedded', a model id or latest:NAME (newest of a lineage) from the models table "
        "(its path is loaded), a local checkpoint folder, or a model name the backend knows",
    )
    datasets: list[str] = Field(
        default_factory=lambda: ["hotpotqa"],
        min_length=1,
        description="Datasets whose questions are answered; a bundled one the warehouse lacks is ingested",
    )
    partition: Partition = Field(
        "test",
        description="Partition whose questions are answered: test for reported figures, valid "
        "for model selection; train overlaps what builds expand (warned about and recorded)",
    )
    limit: int | None = Field(
        None, ge=1, description="The first N questions of each dataset's partition, in sample_key (hash) order"
    )
    modes: list[EvalMode] = Field(
        default_factory=lambda: list(EVAL_MODES),
        min_length=1,
        description="agentic (ReasonRAG Algorithm 1), direct (naive generation), rag (standard RAG), "
        "or a mode another strategy adds (docs/evaluation.md)",
    )
    max_rounds: int = Field(
        _INFERENCE.max_rounds, ge=1, description="Algorithm 1's N: model calls per agentic question"
    )
    top_k: int | None = Field(None, ge=1, description="Documents per retrieval; default retrieval.top_k")
    max_tokens: int = Field(_INFERENCE.max_tokens, ge=1, description="Tokens per model call at most")
    temperature: float = Field(_INFERENCE.temperature, ge=0.0, description="0: greedy, repeatable")
    sources: list[str] | None = Field(None, description="Passage sources searched; default each dataset's own passages")
    compare: str | None = Field(
        None,
        description="A base model to compare with: it answers the same questions in the same modes, "
        "and eval_compare gets EM / F1 deltas with paired bootstrap 95% intervals and McNemar's test",
    )
    retrieval: RetrievalConfig = RetrievalConfig()
    llm: LLMConfig = Field(
        default_factory=LLMConfig, description="Engine settings; the policy's model is set by `model`"
    )
    seed: int = 0
    warehouse: WarehouseConfig = WarehouseConfig()
    allow_downloads: bool = Field(
        False,
        description="Let the evaluation fetch its model from a model hub; false (default): it runs "
        "offline and the model must be 'embedded', registered, a local folder or in the local HF cache",
    )

    def model_post_init(self, context: Any, /) -> None:
        for name in ("datasets", "modes"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"evaluate: {name} lists a value twice: {values}")

    @model_validator(mode="after")
    def _max_tokens_fit_the_grammars(self) -> EvalConfig:
        if self.llm.policy.structured:
            from ragfactory.tasks.eval.inference import check_max_tokens

            check_max_tokens(self.modes, self.max_tokens)
        return self

    def inference(self) -> InferenceConfig:
        return InferenceConfig(
            max_rounds=self.max_rounds,
            top_k=self.top_k or self.retrieval.top_k,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=self.seed,
        )

    def answer_fields(self) -> dict:
        """What shapes an answer (not which questions, nor where rows go); the engine's dtype and options when set."""
        engine = self.llm.policy.model_dump(mode="json", include={"dtype", "options"}, exclude_defaults=True)
        fields = self.model_dump(mode="json", include={"sources", "retrieval"}) | ({"engine": engine} if engine else {})
        return fields | {"inference": vars(self.inference()), "backend": self.llm.policy.backend}


class NightlyConfig(Section):
    """Parameters of the ``nightly`` flow (docs/flywheel.md): build with the promoted policy,
    train a candidate on the new exports, promote it only on a held-out gain."""

    name: str = Field("nightly", description="The pipeline's name: its promotions rows and its models' lineage")
    build: BuildConfig = Field(description="The night's build; search.select: frontier adds new questions each night")
    base_model: str = Field(
        "embedded", description="The policy and incumbent until a night promotes a model ('promoted' after)"
    )
    expand_with: Literal["promoted", "config"] = Field(
        "promoted", description="The builds' policy: the promoted model, or the build's own (a teacher engine)"
    )
    methods: list[TrainMethod] = Field(
        default_factory=lambda: ["sft", "dpo"],
        min_length=1,
        description="Trainings in order, each from the last one's model (the first from the incumbent); "
        "the last one's model is the night's candidate",
    )
    trl: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="TRL overrides per method, e.g. {sft: {max_steps: 20}}"
    )
    window: int = Field(
        0, ge=0, description="Earlier nights' exports trained on with this night's (0: this night's only)"
    )
    evaluation: EvalConfig = Field(
        default_factory=lambda: EvalConfig(limit=50, modes=["agentic"]),
        description="How the candidate and the incumbent are evaluated; the partition is set to valid "
        "for the decision, and the promoted model is then reported on test",
    )
    metric: Literal["em", "f1", "cover_em"] = Field("f1", description="The metric whose delta decides")
    mode: EvalMode = Field("agentic", description="The evaluation mode whose metric decides")
    confidence: float = Field(0.95, gt=0.0, lt=1.0, description="Confidence of the bootstrap interval")

    @model_validator(mode="after")
    def _mode_is_evaluated(self) -> NightlyConfig:
        if self.mode not in self.evaluation.modes:
            raise ValueError(f"nightly: mode {self.mode!r} decides but evaluation.modes is {self.evaluation.modes}")
        return self
