"""A training method's spec, and what a method built here gets to build its trainer.

A ``MethodSpec`` (one per method, each in its module of ``tasks/training/methods/``) says:

1. ``name``: the ``train --method`` value, the ``models.method`` of what it trains and the
   prefix of their ids;
2. ``table``: the export table it reads by default (``train --table`` picks another);
3. ``columns`` it needs and ``optional`` ones it reads when an export has them
   (``data.read_export`` refuses an export without the former, naming them);
4. ``options``: the ``TrainConfig.options`` keys it reads (any other is refused, naming these);
5. ``config`` (``"module:Class"``, TRL's ``SFTConfig`` … or a method's own) and ``defaults``, the
   values it overrides there, each with its reason; the caller's ``trl`` overrides them in turn;
6. how it trains: ``trainer`` (``"module:Class"``), one of TRL's stock trainers, wired by
   ``trainers.make_trainer`` to the rows ``prepare`` (``"module:function"``, optional) makes of
   the export; or ``module``, whose ``build_trainer(MethodContext)`` returns a ready trainer;
7. ``rewarded``: its trainer scores completions with the reward functions the run names
   (``tasks/training/rewards.py``); ``vllm``: it generates through vLLM on CUDA workers that
   have it;
8. ``rewards``: reward factories it declares by name (the ``prm`` method's trained model as
   GRPO's ``prm`` reward), in the signature of ``tasks/rewards/__init__.py``.

Modules named by string are imported on use, so reading the specs loads neither torch nor TRL.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragfactory.tasks.rewards import RewardFactory
from ragfactory.warehouse.store import Warehouse

# options the reward functions read (a strategy's: metric; the prm reward: the PRM and its
# aggregate), beside a method's own
REWARD_OPTIONS = ("metric", "prm_model", "prm_aggregate")
# options every method reads, beside its own: none shapes the weights, so none is in the cache key
# (``trackers``: where the logged numbers also go, ``tasks/training/trackers.py``)
COMMON_OPTIONS = ("trackers",)


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


# TRL's default batch of 8 as 4 micro-batches of 2 (SFT's and DPO's defaults): the same gradient
# per step, a quarter of the activations resident. A batch size a run asks for is one forward, as
# in TRL (``trainers.trl_args`` drops the accumulation).
MICRO_BATCH: Mapping[str, int] = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4}


@dataclass(frozen=True)
class MethodSpec:
    """One training method (module docstring)."""

    name: str
    table: str
    columns: tuple[str, ...]
    optional: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    config: str = "transformers:TrainingArguments"
    defaults: Mapping[str, Any] = field(default_factory=dict)
    trainer: str | None = None
    prepare: str | None = None
    module: str | None = None
    rewarded: bool = False
    vllm: bool = False
    rewards: Mapping[str, RewardFactory] = field(default_factory=dict)

    def __post_init__(self):
        if (self.trainer is None) == (self.module is None):
            raise ValueError(
                f"method {self.name!r}: give exactly one of trainer (a stock TRL trainer) "
                "or module (one with build_trainer)"
            )

    @property
    def stock(self) -> bool:
        """Whether it trains with a stock TRL trainer (``trainers.make_trainer``)."""
        return self.module is None

    @property
    def build(self) -> Callable[[MethodContext], Any]:
        return importlib.import_module(self.module).build_trainer

    @property
    def config_class(self) -> type:
        return _load(self.config)

    @property
    def trainer_class(self) -> type:
        return _load(self.trainer)

    def prepared(self, rows: list[dict]) -> list[dict]:
        """The rows its stock trainer reads, made of the export's (as they are without ``prepare``)."""
        return _load(self.prepare)(rows) if self.prepare else rows


@dataclass
class MethodContext:
    """What a method's ``build`` gets: everything but the trainer it returns; reward factories
    read it too (a ``RewardContext``, ``tasks/rewards/__init__.py``)."""

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
        rows = query(
            self.warehouse, "select config, inputs from runs where run_id = $run_id", {"run_id": self.run_id}
        ).to_pylist()
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
        rows = query(
            self.warehouse,
            "select question_id, question from questions where list_contains($ids, question_id)",
            {"ids": ids},
        ).to_pylist()
        return {r["question_id"]: r["question"] for r in rows}
