"""The training methods beyond TRL's stock SFT / DPO / GRPO, behind one seam.

A method names the export table it reads by default, the columns it needs, and a ``build``
function that turns a ``MethodContext`` (the export's rows, the base model's folder, the TRL
overrides, the warehouse) into a ready ``transformers.Trainer``; ``runs.train_planned`` then
trains it like any other (resume, save, metrics). Stock methods keep their path in
``trainers.make_trainer``.

| method           | export table   | trainer                                                      |
|------------------|----------------|--------------------------------------------------------------|
| `tree-advantage` | `trajectories` | TreePS-RAG Eq. 3: per-token advantages A(n), observations masked |
| `grpo-agentic`   | `grpo_prompts` | TRL GRPO, multi-turn, the build's retriever answers `<search>` |
| `prm`            | `step_labels`  | a step reward model: token classification on step separators |
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragfactory.warehouse.store import Warehouse

# options the reward functions read (a strategy's: metric; ``prm.py``: the PRM and its
# aggregate), beside a method's own
REWARD_OPTIONS = ("metric", "prm_model", "prm_aggregate")


@dataclass
class MethodContext:
    """What a method's ``build`` gets: everything but the trainer it returns."""

    rows: list[dict]  # the export rows, with the method's columns
    model_path: str  # a folder ``from_pretrained`` loads (the embedded model converted)
    output_dir: str
    trl: dict[str, Any]  # the caller's overrides of the method's TRL config
    save_steps: int
    seed: int
    callbacks: Sequence = ()
    logger: logging.Logger | logging.LoggerAdapter = logging.getLogger("ragfactory.training")
    warehouse: Warehouse | None = None
    run_id: str | None = None  # the build whose export this is (None: a parquet file)
    rewards: list[str] = field(default_factory=list)  # reward function names (GRPO methods)
    peft_config: Any = None
    options: dict[str, Any] = field(default_factory=dict)  # method-specific settings

    def build_run(self) -> dict[str, Any] | None:
        """The build run's ``config`` (parsed) and ``inputs`` from ``runs``; None when the export is
        a parquet file or the run is not recorded."""
        from ragfactory.warehouse.catalog import query

        if self.run_id is None or self.warehouse is None:
            return None
        rows = query(self.warehouse, "select config, inputs from runs where run_id = $run_id",
                     {"run_id": self.run_id}).to_pylist()
        return {**rows[0], "config": json.loads(rows[0]["config"] or "{}")} if rows else None

    def judge_generator(self):
        """The build's judge (its ``llm`` config's judge role, else its policy) as a generator,
        its calls cached under the training's own name."""
        from ragfactory.tasks.llm.cache import CallCache
        from ragfactory.tasks.llm.config import LLMConfig
        from ragfactory.tasks.llm.engine import make_batcher

        run = self.build_run()
        llm = LLMConfig.model_validate((run["config"].get("llm") or {}) if run else {})
        cache = CallCache(f"train-{self.run_id or 'parquet'}")
        return make_batcher(llm, cache, self.warehouse.artifacts_dir("models"))

    def question_texts(self) -> dict[str, str]:
        """``question_id -> question`` of the rows' questions, from the warehouse."""
        from ragfactory.warehouse.catalog import query

        ids = sorted({str(r["question_id"]) for r in self.rows})
        rows = query(self.warehouse, "select question_id, question from questions where list_contains($ids, question_id)",
                     {"ids": ids}).to_pylist()
        return {r["question_id"]: r["question"] for r in rows}


@dataclass(frozen=True)
class MethodSpec:
    name: str
    table: str
    columns: tuple[str, ...]
    module: str  # imported on use: torch and TRL load only when the method trains
    optional: tuple[str, ...] = ()
    options: tuple[str, ...] = ()  # the ``TrainConfig.options`` keys it reads
    config: str = "transformers:TrainingArguments"  # "module:Class" of its trainer's config

    @property
    def build(self) -> Callable[[MethodContext], Any]:
        return importlib.import_module(self.module).build_trainer

    @property
    def config_class(self) -> type:
        module, _, name = self.config.partition(":")
        return getattr(importlib.import_module(module), name)


METHODS: dict[str, MethodSpec] = {
    spec.name: spec for spec in (
        MethodSpec("tree-advantage", "trajectories",
                   ("prompt", "response", "step_spans", "observation_spans", "is_sampled"),
                   "ragfactory.tasks.training.tree_advantage",
                   config="ragfactory.tasks.training.tree_advantage:TreeAdvantageConfig"),
        MethodSpec("grpo-agentic", "grpo_prompts", ("prompt", "golden_answers", "question_id"),
                   "ragfactory.tasks.training.agentic", optional=("task",), config="trl:GRPOConfig",
                   options=("max_turns", "top_k", "retriever", "sources", "grammar", "turn_tokens",
                            *REWARD_OPTIONS)),
        MethodSpec("prm", "step_labels", ("label_id", "prompt", "completions", "labels"),
                   "ragfactory.tasks.training.prm", options=("heldout_fraction", "max_length")),
    )
}
# TRL's stock methods read options only for their rewards (GRPO's ``prm``)
STOCK_OPTIONS = {"sft": (), "dpo": (), "grpo": ("prm_model", "prm_aggregate")}


def check_options(method: str, options: dict[str, Any]) -> None:
    """Refuse an option the method does not read, naming the ones it does."""
    known = METHODS[method].options if method in METHODS else STOCK_OPTIONS.get(method, ())
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"train --method {method}: unknown option(s) {unknown}; "
                         f"{'known: ' + ', '.join(known) if known else 'it takes none'}")


def method_spec(name: str) -> MethodSpec | None:
    """The spec of a method built here, or None for TRL's stock SFT / DPO / GRPO."""
    return METHODS.get(name)
