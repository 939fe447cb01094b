"""Which training-data tables each strategy's trees feed: the exporters, keyed by strategy name.

An exporter names the table it writes and the tables it reads (as distilabel steps declare their
columns); ``rows(inputs, export_config, run_seed)`` reads ``inputs[t]`` for each ``t`` in
``reads`` and returns the rows of ``table``. The export part owns this registry rather than the
strategies' plug-ins: exporters read the tree model and the strategies' step formats
(``tasks/search``), so a plug-in naming its exporters would make Search and Export import each
other. The export task (``tasks/training_data.py``) looks a strategy's exporters up here by the
registered name of the strategy that wrote the trees and knows none by name; a strategy with no
entry exports nothing, and a test adds exporters for a toy strategy with ``EXPORTS.registered``.

DecEx-RAG: SFT on the best chains and DPO on sibling branches (000, §2.3). TreePS-RAG: sampled
root-to-leaf trajectories with process advantages, GRPO and verl prompts, stepwise process
labels (004, §2.3; they read node values, which the valuation stage fills in). APEX-Searcher:
executor SFT on correct runs and planner GRPO prompts with their SEPR (002, §2.3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.export.apex import executor_sft_examples, planner_grpo_prompts
from ragfactory.tasks.export.dpo import preference_pairs
from ragfactory.tasks.export.grpo import grpo_prompt_rows
from ragfactory.tasks.export.sft import sft_examples
from ragfactory.tasks.export.step_labels import step_label_rows
from ragfactory.tasks.export.trajectories import trajectory_rows
from ragfactory.tasks.export.verl import verl_rows
from ragfactory.tasks.search.apex.expansion import STRATEGY as APEX
from ragfactory.tasks.search.decex.config import STRATEGY as DECEX
from ragfactory.tasks.search.treeps.expansion import STRATEGY as TREEPS

Rows = list[dict[str, Any]]
ExportInputs = Mapping[str, Sequence[Mapping[str, Any]]]
# Tables an exporter may read: the run's rows of one tree strategy (nodes), the questions those
# nodes answer, and whole-run tables the strategy filled (plans, plan_scores).
EXPORT_INPUTS = ("nodes", "questions", "plans", "plan_scores", "rollouts")


@dataclass(frozen=True)
class Exporter:
    """One training-data table a strategy's trees feed (module docstring)."""

    table: str
    reads: tuple[str, ...]
    rows: Callable[[ExportInputs, Any, int], Rows]

    def __post_init__(self):
        unknown = sorted(set(self.reads) - set(EXPORT_INPUTS))
        if unknown:
            raise ValueError(f"exporter of {self.table!r} reads {unknown}; exporters read {list(EXPORT_INPUTS)}")


@dataclass(frozen=True)
class StrategyExports:
    """The exporters of one strategy's trees, in the order they run."""

    strategy: str
    exporters: tuple[Exporter, ...] = ()

    @property
    def reads(self) -> tuple[str, ...]:
        """The tables its exporters read, in ``EXPORT_INPUTS`` order."""
        wanted = {t for e in self.exporters for t in e.reads}
        return tuple(t for t in EXPORT_INPUTS if t in wanted)

    def export(self, inputs: ExportInputs, config: Any, run_seed: int) -> dict[str, Rows]:
        """``{table: rows}`` of every exporter, in declaration order."""
        missing = [t for t in self.reads if t not in inputs]
        if missing:
            raise ValueError(f"strategy {self.strategy!r}: export inputs lack {missing}")
        return {e.table: e.rows(inputs, config, run_seed) for e in self.exporters}


class ExportRegistry:
    """Exporters by strategy name (``Strategy.name`` in ``tasks/search/registry.py``)."""

    def __init__(self, entries: Sequence[StrategyExports] = ()):
        self._by_strategy: dict[str, StrategyExports] = {}
        for entry in entries:
            self.register(entry)

    def register(self, entry: StrategyExports) -> None:
        if entry.strategy in self._by_strategy:
            raise ValueError(f"exporters of strategy {entry.strategy!r} are already registered")
        self._by_strategy[entry.strategy] = entry

    @contextmanager
    def registered(self, entry: StrategyExports) -> Iterator[StrategyExports]:
        """``entry`` registered for the duration of the block (tests add a toy strategy's)."""
        self.register(entry)
        try:
            yield entry
        finally:
            self._by_strategy.pop(entry.strategy, None)

    def get(self, strategy: str) -> StrategyExports:
        """The exporters of ``strategy``; none when it registered none."""
        return self._by_strategy.get(strategy) or StrategyExports(strategy)


def _decex_sft(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return sft_examples(inputs["nodes"], inputs["questions"], config.sft)


def _decex_dpo(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return preference_pairs(inputs["nodes"], inputs["questions"], config.dpo)


def _treeps_trajectories(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return trajectory_rows(inputs["nodes"], config.trajectories, run_seed)


def _treeps_grpo(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return grpo_prompt_rows(inputs["nodes"], inputs["questions"])


def _treeps_verl(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return verl_rows(inputs["nodes"], inputs["questions"])


def _treeps_step_labels(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return step_label_rows(inputs["nodes"], config.step_labels)


def _apex_executor_sft(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return executor_sft_examples(inputs["nodes"], inputs["questions"], config.apex)


def _apex_planner_grpo(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return planner_grpo_prompts(inputs["plans"], inputs["plan_scores"], inputs["questions"], config.apex)


EXPORTS = ExportRegistry([
    StrategyExports(DECEX, (
        Exporter("sft_examples", ("nodes", "questions"), _decex_sft),
        Exporter("preference_pairs", ("nodes", "questions"), _decex_dpo),
    )),
    StrategyExports(TREEPS, (
        Exporter("trajectories", ("nodes",), _treeps_trajectories),
        Exporter("grpo_prompts", ("nodes", "questions"), _treeps_grpo),
        Exporter("verl_prompts", ("nodes", "questions"), _treeps_verl),
        Exporter("step_labels", ("nodes",), _treeps_step_labels),
    )),
    StrategyExports(APEX, (
        Exporter("sft_examples", ("nodes", "questions"), _apex_executor_sft),
        Exporter("grpo_prompts", ("plans", "plan_scores", "questions"), _apex_planner_grpo),
    )),
])
