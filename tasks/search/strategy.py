"""The Strategy contract and its registry (docs/architecture.md, "Strategy plug-in").

A strategy is a registered plug-in that declares:

1. its ``name``: what ``search.strategies`` lists, the config section it reads
   (``search.<name>``) and the prefix of its shard names; ``variants`` are further
   ``nodes.strategy`` values its configs may write (DecEx-RAG without pruning writes its own);
2. its ``config_type``: the frozen dataclass beside the algorithm, with the paper's defaults;
3. ``expand``: one ``questions`` row in a ``ShardContext`` (generator, retriever, scorer, run id
   and seed) to the rows of every table it fills (``TableRows``);
4. optionally ``open_scorer`` (a service built once per shard from its config, e.g. APEX-Searcher's SEPR
   plan scorer; flushed when the shard is done) and ``encoders`` (embedding models it loads, by
   config field, so preflight resolves them before the build starts);
5. ``valued``: whether its exporters read Monte-Carlo node values (``visits``, ``value``,
   ``advantage``), which the build's valuation stage fills in over its ``nodes`` after expansion
   (``tasks/valuate.py``); a strategy never values its tree itself for export;
6. ``description``: the one line the build config shows for its ``search.<name>`` section (a
   strategy added later enters the config hash only once its section is set:
   ``flows/config_hash.py``, so the run ids of builds made before it hold);
7. ``exports``: the dotted name of the module in its folder that declares its exporters
   (``EXPORTS``, a ``StrategyExports``) and, optionally, its ``export.<name>`` settings
   (``EXPORT_CONFIG``). It is named, not imported: that module belongs to the export part
   (``tasks/export/registry.py`` loads it), so Search never imports Export;
8. ``views``: the folder of its SQL views (``<view name>.sql``), which the warehouse catalog
   shows beside its own (registered through ``ragfactory/plugins.py``);
9. ``explain``: optionally, why one of its nodes was kept or pruned, in the dashboard's words
   (``ragfactory/dashboard/fates.py``), before the generic rules: ``explain(node, siblings,
   state)`` reads the decision the strategy recorded in the node's row and ``parsed`` fields (a
   dict) and those of its siblings, and says ``None`` for a node it has nothing to say about;
10. ``training``: optionally, the dotted name of the module in its folder that declares what its
    data trains with: ``REWARDS``, reward functions by the name ``train --rewards`` gives them,
    each built per run from the training's context (``tasks/rewards/__init__.py``). Named, not
    imported, like ``exports``: that module belongs to the training part;
11. ``evaluation``: optionally, the dotted name of the module in its folder that declares
    ``MODES``, the evaluation modes it adds (the inference its data trains, by mode name, as
    ``tasks/eval/runner.py`` calls a mode), and ``GRAMMARS``, the prompts whose output grammars
    hold each mode's answers (``tasks/eval/inference.py`` checks ``max_tokens`` against them).
    That module belongs to the evaluation part;
12. ``prompts``: optionally, the folder of its prompt templates and output grammars
    (``<prompt>.txt``, ``<prompt>.lark``), registered through ``ragfactory/plugins.py`` so that the
    prompt loader finds them by name (``tasks/prompts/loader.py``; it also finds the shipped
    strategies' ``prompts/`` folders without the registry).

The shard runner, the config, its hash, the expand and export tasks and the catalog look
strategies up here and know none by name. Adding a strategy is one sub-package under
``tasks/search/`` and one line in ``tasks/search/registry.py``; a test may ``register`` a toy
one for as long as it runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

from ragfactory.plugins import register_prompts, register_views, unregister_prompts, unregister_views
from ragfactory.tasks.llm.types import Generator
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.search.tree import TableRows


@dataclass(frozen=True)
class ShardContext:
    """What every question of a shard shares: the services and the run's identity."""

    generator: Generator
    retriever: Retriever
    run_id: str
    run_seed: int
    scorer: Any = None  # what the strategy's ``open_scorer`` built, or None


Expand = Callable[[Mapping[str, Any], ShardContext, Any], Awaitable[TableRows]]
# (node, its siblings, "kept" or "pruned") -> the sentence, or None (module docstring, 9.)
Explain = Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]], str], str | None]


def shown(value: Any) -> str:
    """A number as the explanations print it: four significant digits for a float.

    >>> shown(0.123456), shown(3), shown(None)
    ('0.1235', '3', 'None')
    """
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Strategy:
    """A search strategy as the build sees it (module docstring)."""

    name: str
    config_type: type
    expand: Expand
    variants: tuple[str, ...] = ()
    open_scorer: Callable[[Any, Path], Any] | None = None
    encoders: Callable[[Any], dict[str, str]] = field(default=lambda config: {})
    valued: bool = False
    description: str = ""
    exports: str | None = None
    views: Path | None = None
    explain: Explain | None = None
    training: str | None = None
    evaluation: str | None = None
    prompts: Path | None = None

    @property
    def tree_names(self) -> tuple[str, ...]:
        """Every ``nodes.strategy`` value this strategy may write."""
        return (self.name, *self.variants)

    def tree_name(self, config: Any) -> str:
        """The ``nodes.strategy`` value ``config`` writes (a config may name a variant)."""
        name = getattr(config, "strategy", self.name)
        if name not in self.tree_names:
            raise ValueError(
                f"strategy {self.name!r}: config writes trees named {name!r}, not one of {list(self.tree_names)}"
            )
        return name

    def settings(self, search: Any) -> Any:
        """This strategy's config in a build's ``search`` section; its defaults when the section
        has no ``<name>`` field (a plug-in the config schema does not list)."""
        config = getattr(search, self.name, None)
        return self.config_type() if config is None else config


class Registry:
    """Strategies by name; a tree name (``nodes.strategy``) finds the strategy that writes it."""

    def __init__(self, strategies: Sequence[Strategy] = ()):
        self._by_name: dict[str, Strategy] = {}
        for strategy in strategies:
            self.register(strategy)

    def register(self, strategy: Strategy) -> None:
        taken = {name for s in self._by_name.values() for name in s.tree_names}
        clash = sorted(taken & set(strategy.tree_names))
        if clash:
            raise ValueError(f"strategy {strategy.name!r}: names {clash} are already registered")
        self._by_name[strategy.name] = strategy
        if strategy.views is not None:
            register_views(strategy.name, strategy.views)
        if strategy.prompts is not None:
            register_prompts(strategy.name, strategy.prompts)

    def unregister(self, name: str) -> None:
        if self._by_name.pop(name, None) is not None:
            unregister_views(name)
            unregister_prompts(name)

    def __iter__(self) -> Iterator[Strategy]:
        """The strategies in registration order (the order of the config's sections)."""
        return iter(list(self._by_name.values()))

    @contextmanager
    def registered(self, strategy: Strategy) -> Iterator[Strategy]:
        """``strategy`` registered for the duration of the block (tests add toy strategies)."""
        self.register(strategy)
        try:
            yield strategy
        finally:
            self.unregister(strategy.name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def get(self, name: str) -> Strategy:
        try:
            return self._by_name[name]
        except KeyError:
            raise ValueError(f"unknown strategy {name!r}; known: {self.names()}") from None

    def declared(self, hook: str, name: str) -> dict[str, Any]:
        """The ``name`` mappings that the strategies' ``hook`` modules (``training``,
        ``evaluation``) declare, merged in registration order; a key declared twice is an error."""
        merged: dict[str, Any] = {}
        for strategy in self._by_name.values():
            module = getattr(strategy, hook)
            declared = getattr(import_module(module), name, {}) if module else {}
            clash = sorted(set(declared) & set(merged))
            if clash:
                raise ValueError(f"strategy {strategy.name!r} declares {hook} {name} {clash} again")
            merged |= declared
        return merged

    def by_tree_name(self, tree_name: str) -> Strategy:
        """The strategy whose trees are named ``tree_name`` in ``nodes.strategy``."""
        for strategy in self._by_name.values():
            if tree_name in strategy.tree_names:
                return strategy
        known = sorted(n for s in self._by_name.values() for n in s.tree_names)
        raise ValueError(f"no strategy writes trees named {tree_name!r}; known: {known}")
