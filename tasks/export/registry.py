"""Which training-data tables each strategy's trees feed: the exporters, keyed by strategy name.

An exporter names the table it writes and the columns it reads of each input table (as distilabel
steps declare theirs); ``rows(inputs, export_config, run_seed)`` reads ``inputs[t]`` for each
``t`` in ``reads`` and returns the rows of ``table``. The export task reads exactly the declared
columns (``tasks/training_data.py``), so a column an exporter uses without declaring it is a
KeyError in its tests, not a silent dependency. Exporters of trees read whole ``nodes`` rows
(``TREE_COLUMNS``): the tree model (``tasks/search/tree.py``) carries every column to the step
formats. The export part owns this registry rather than the
strategies' plug-ins: exporters read the tree model and the strategies' step formats
(``tasks/search``), so a plug-in naming its exporters would make Search and Export import each
other. The export task (``tasks/training_data.py``) looks a strategy's exporters up here by the
registered name of the strategy that wrote the trees and knows none by name; a strategy with no
entry exports nothing, and a test adds exporters for a toy strategy with ``EXPORTS.registered``.

DecEx-RAG: SFT on the best chains and DPO on sibling branches (§2.3). TreePS-RAG: sampled
root-to-leaf trajectories with process advantages, GRPO and verl prompts, stepwise process
labels (TreePS-RAG, §2.3; they read node values, which the valuation stage fills in). APEX-Searcher:
executor SFT on correct runs and planner GRPO prompts with their SEPR (APEX-Searcher, §2.3). ReasonRAG
MCTS: step preference pairs per state and SFT on the best answer's path (ReasonRAG, §2.2.3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.export.apex import executor_sft_examples, planner_grpo_prompts
from ragfactory.tasks.export.dpo import preference_pairs
from ragfactory.tasks.export.grpo import grpo_prompt_rows
from ragfactory.tasks.export.mcts import mcts_preference_pairs, mcts_sft_examples
from ragfactory.tasks.export.r3 import r3_sft_examples
from ragfactory.tasks.export.sft import sft_examples
from ragfactory.tasks.export.step_labels import step_label_rows
from ragfactory.tasks.export.trajectories import trajectory_rows
from ragfactory.tasks.export.verl import verl_rows
from ragfactory.tasks.search.apex.expansion import STRATEGY as APEX
from ragfactory.tasks.search.decex.config import STRATEGY as DECEX
from ragfactory.tasks.search.mcts.config import STRATEGY as MCTS
from ragfactory.tasks.search.r3.config import STRATEGY as R3
from ragfactory.tasks.search.treeps.expansion import STRATEGY as TREEPS

Rows = list[dict[str, Any]]
ExportInputs = Mapping[str, Sequence[Mapping[str, Any]]]
# Tables an exporter may read: the run's rows of one tree strategy (nodes), the questions those
# nodes answer, and whole-run tables the strategy filled (plans, plan_scores).
EXPORT_INPUTS = ("nodes", "questions", "plans", "plan_scores", "rollouts")
TREE_COLUMNS = tuple(table_spec("nodes").schema.names)
# what the export task reads of ``questions`` whatever the exporters declare: decontamination
# screens each exported row's question text
SCREENED_QUESTION_COLUMNS = ("question_id", "question")


@dataclass(frozen=True)
class Exporter:
    """One training-data table a strategy's trees feed (module docstring)."""

    table: str
    reads: Mapping[str, tuple[str, ...]]
    rows: Callable[[ExportInputs, Any, int], Rows]

    def __post_init__(self):
        unknown = sorted(set(self.reads) - set(EXPORT_INPUTS))
        if unknown:
            raise ValueError(f"exporter of {self.table!r} reads {unknown}; exporters read {list(EXPORT_INPUTS)}")
        for table, columns in self.reads.items():
            missing = sorted(set(columns) - set(table_spec(table).schema.names))
            if missing or not columns:
                raise ValueError(f"exporter of {self.table!r} reads columns {missing or '(none)'} of "
                                 f"{table!r}, which has {table_spec(table).schema.names}")


@dataclass(frozen=True)
class StrategyExports:
    """The exporters of one strategy's trees, in the order they run."""

    strategy: str
    exporters: tuple[Exporter, ...] = ()

    @property
    def reads(self) -> dict[str, tuple[str, ...]]:
        """``{table: columns}`` its exporters read, tables in ``EXPORT_INPUTS`` order and columns
        in the table's schema order."""
        wanted: dict[str, set[str]] = {}
        for exporter in self.exporters:
            for table, columns in exporter.reads.items():
                wanted.setdefault(table, set()).update(columns)
        return {t: tuple(c for c in table_spec(t).schema.names if c in wanted[t])
                for t in EXPORT_INPUTS if t in wanted}

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

    def tables(self) -> list[str]:
        """Every table some registered strategy exports, sorted."""
        return sorted({e.table for entry in self._by_strategy.values() for e in entry.exporters})

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


TEXTS = {"questions": ("question_id", "question")}
GOLDS = {"questions": ("question_id", "golden_answers")}

def _mcts_sft(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return mcts_sft_examples(inputs["nodes"], inputs["questions"], config.sft)


def _r3_sft(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return r3_sft_examples(inputs["nodes"], inputs["questions"])


def _mcts_dpo(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return mcts_preference_pairs(inputs["nodes"], inputs["questions"], config.dpo)


EXPORTS = ExportRegistry([
    StrategyExports(DECEX, (
        Exporter("sft_examples", {"nodes": TREE_COLUMNS} | TEXTS, _decex_sft),
        Exporter("preference_pairs", {"nodes": TREE_COLUMNS} | TEXTS, _decex_dpo),
    )),
    StrategyExports(TREEPS, (
        Exporter("trajectories", {"nodes": TREE_COLUMNS}, _treeps_trajectories),
        Exporter("grpo_prompts", {"nodes": TREE_COLUMNS} | GOLDS, _treeps_grpo),
        Exporter("verl_prompts", {"nodes": TREE_COLUMNS,
                                  "questions": ("question_id", "dataset", "split", "golden_answers")}, _treeps_verl),
        Exporter("step_labels", {"nodes": TREE_COLUMNS}, _treeps_step_labels),
    )),
    StrategyExports(APEX, (
        Exporter("sft_examples", {"nodes": TREE_COLUMNS} | TEXTS, _apex_executor_sft),
        Exporter("grpo_prompts", {"plans": ("run_id", "question_id", "plan_id", "source", "steps"),
                                  "plan_scores": ("plan_id", "f1"),
                                  "questions": ("question_id", "question", "golden_answers")},
                 _apex_planner_grpo),
    )),
    StrategyExports(MCTS, (
        Exporter("sft_examples", {"nodes": TREE_COLUMNS} | TEXTS, _mcts_sft),
        Exporter("preference_pairs", {"nodes": TREE_COLUMNS} | TEXTS, _mcts_dpo),
    )),
    StrategyExports(R3, (
        Exporter("sft_examples", {"nodes": TREE_COLUMNS} | TEXTS, _r3_sft),
    )),
])
