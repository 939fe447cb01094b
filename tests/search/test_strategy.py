"""The Strategy contract and registry: lookups, name clashes, tree names."""

from __future__ import annotations

import pytest

from ragfactory.tasks.search.decex.config import DecExConfig
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.search.strategy import Registry, Strategy


async def _expand(question, context, config):
    raise AssertionError("not expanded here")


def test_the_shipped_strategies_are_registered_with_their_tree_names():
    assert STRATEGIES.names() == ["apex", "decex", "mcts", "r3", "treeps"]
    assert STRATEGIES.by_tree_name("decex_no_pruning") is STRATEGIES.get("decex")
    assert STRATEGIES.get("decex").tree_name(DecExConfig(no_pruning=True)) == "decex_no_pruning"
    assert [s.name for s in (STRATEGIES.get(n) for n in STRATEGIES.names()) if s.valued] == ["treeps"]
    assert STRATEGIES.get("apex").encoders(STRATEGIES.get("apex").config_type()) == {"sepr.model": "all-MiniLM-L6-v2"}


def test_unknown_names_are_errors_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown strategy 'prm'; known: \['apex', 'decex', 'mcts', 'r3', 'treeps'\]"):
        STRATEGIES.get("prm")
    with pytest.raises(ValueError, match="no strategy writes trees named 'prm'"):
        STRATEGIES.by_tree_name("prm")


def test_a_strategy_cannot_take_a_registered_name_or_tree_name():
    registry = Registry([Strategy("a", dict, _expand, variants=("a_wide",))])
    with pytest.raises(ValueError, match=r"strategy 'b': names \['a_wide'\] are already registered"):
        registry.register(Strategy("b", dict, _expand, variants=("a_wide",)))


def test_registered_holds_a_strategy_for_the_block_only():
    toy = Strategy("toy", dict, _expand)
    with STRATEGIES.registered(toy):
        assert STRATEGIES.get("toy") is toy
    assert "toy" not in STRATEGIES.names()


def test_a_config_naming_a_tree_its_strategy_does_not_write_is_an_error():
    class Odd:
        strategy = "other"

    with pytest.raises(ValueError, match="config writes trees named 'other'"):
        STRATEGIES.get("decex").tree_name(Odd())


@pytest.mark.timeout(30)
def test_a_retriever_raising_stop_iteration_fails_the_search_instead_of_hanging():
    import asyncio

    from ragfactory.tasks.search.common import search_batch

    class DryRetriever:
        def search(self, queries, k):
            return [next(iter([]))]

    with pytest.raises(RuntimeError, match="DryRetriever.search raised StopIteration"):
        asyncio.run(search_batch(DryRetriever(), ["jaws"], 3))
