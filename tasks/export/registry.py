"""Which training-data tables each strategy's trees feed: the exporters, keyed by strategy name.

An exporter names the table it writes and the columns it reads of each input table (as distilabel
steps declare theirs); ``rows(inputs, export_config, run_seed)`` reads ``inputs[t]`` for each
``t`` in ``reads`` and returns the rows of ``table``. The export task reads exactly the declared
columns (``tasks/training_data.py``), so a column an exporter uses without declaring it is a
KeyError in its tests, not a silent dependency. An exporter of trees declares ``tree_columns(...)``:
the columns that place a row in its tree (``group_trees``, ``tasks/search/tree.py``) and the
further ``nodes`` columns it reads; the tree model carries exactly those to the step formats.

Each strategy declares its exporters in its own folder: the module its plug-in names as
``exports`` (``tasks/search/<name>/exports.py``) holds ``EXPORTS``, a ``StrategyExports``, and
may hold ``EXPORT_CONFIG``, ``{section: (description, model)}`` of the ``export.<section>``
settings its exporters read. That
module belongs to the export part (it reads the tree model and the strategy's step formats and
declares ``Exporter`` rows), so the plug-in names it rather than importing it and Search never
imports Export; ``EXPORTS`` here loads it on first use. The export task
(``tasks/training_data.py``) looks a strategy's exporters up here by the registered name of the
strategy that wrote the trees and knows none by name; a strategy that declares none exports
nothing, and a test may add exporters with ``EXPORTS.registered``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.search.strategy import Registry
from ragfactory.tasks.search.tree import REQUIRED_ROW_COLUMNS

Rows = list[dict[str, Any]]
ExportInputs = Mapping[str, Sequence[Mapping[str, Any]]]
# Tables an exporter may read: the run's rows of one tree strategy (nodes), the questions those
# nodes answer, the calls that generated those nodes (llm_calls: their token ids), and whole-run
# tables the strategy filled (plans, plan_scores).
EXPORT_INPUTS = ("nodes", "questions", "llm_calls", "plans", "plan_scores", "rollouts")
# what the export task reads of ``questions`` whatever the exporters declare: decontamination
# screens each exported row's question text
SCREENED_QUESTION_COLUMNS = ("question_id", "question")


def tree_columns(*more: str) -> tuple[str, ...]:
    """The ``nodes`` columns an exporter of trees reads: those that place a row in its tree, then
    ``more``."""
    return (*REQUIRED_ROW_COLUMNS, *more)


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
                raise ValueError(
                    f"exporter of {self.table!r} reads columns {missing or '(none)'} of "
                    f"{table!r}, which has {table_spec(table).schema.names}"
                )


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
        return {t: tuple(c for c in table_spec(t).schema.names if c in wanted[t]) for t in EXPORT_INPUTS if t in wanted}

    def export(self, inputs: ExportInputs, config: Any, run_seed: int) -> dict[str, Rows]:
        """``{table: rows}`` of every exporter, in declaration order."""
        missing = [t for t in self.reads if t not in inputs]
        if missing:
            raise ValueError(f"strategy {self.strategy!r}: export inputs lack {missing}")
        return {e.table: e.rows(inputs, config, run_seed) for e in self.exporters}


class ExportRegistry:
    """Exporters by strategy name (``Strategy.name`` in ``tasks/search/registry.py``): those
    registered here, else those the strategy's ``exports`` module declares."""

    def __init__(self, entries: Sequence[StrategyExports] = (), strategies: Registry | None = None):
        self._by_strategy: dict[str, StrategyExports] = {}
        self._strategies = strategies
        for entry in entries:
            self.register(entry)

    def declared(self, strategy: str) -> Any:
        """The ``exports`` module a registered strategy names, loaded; None when it names none."""
        if self._strategies is None or strategy not in self._strategies.names():
            return None
        module = self._strategies.get(strategy).exports
        return import_module(module) if module else None

    def _entries(self) -> list[StrategyExports]:
        names = [] if self._strategies is None else self._strategies.names()
        return [self.get(name) for name in dict.fromkeys([*self._by_strategy, *names])]

    def export_configs(self) -> dict[str, tuple[str, type]]:
        """``{section: (description, model)}`` of the ``export.<section>`` settings the
        strategies declare, in registration order; a section declared twice is an error."""
        sections: dict[str, tuple[str, type]] = {}
        for strategy in self._strategies or ():
            declared = getattr(self.declared(strategy.name), "EXPORT_CONFIG", {})
            clash = sorted(set(declared) & set(sections))
            if clash:
                raise ValueError(f"strategy {strategy.name!r} declares export sections {clash} again")
            sections |= declared
        return sections

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
        return sorted({e.table for entry in self._entries() for e in entry.exporters})

    def get(self, strategy: str) -> StrategyExports:
        """The exporters of ``strategy``; none when it declared none."""
        if strategy in self._by_strategy:
            return self._by_strategy[strategy]
        module = self.declared(strategy)
        return getattr(module, "EXPORTS", None) or StrategyExports(strategy)


EXPORTS = ExportRegistry(strategies=STRATEGIES)
