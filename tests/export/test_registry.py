"""The export registry: each strategy's exporters by name, and what they declare they read."""

from __future__ import annotations

import pytest

from ragfactory.tasks.export.registry import (
    EXPORTS,
    Exporter,
    ExportRegistry,
    StrategyExports,
)
from ragfactory.tasks.search.registry import STRATEGIES


def _rows(inputs, config, run_seed):
    return [{"n": len(inputs["nodes"])}]


def test_every_shipped_strategy_has_its_exporters():
    assert [e.table for e in EXPORTS.get("treeps").exporters] == [
        "trajectories",
        "grpo_prompts",
        "verl_prompts",
        "step_labels",
    ]
    assert [e.table for e in EXPORTS.get("decex").exporters] == ["sft_examples", "preference_pairs"]
    # tables in EXPORT_INPUTS order, each with the union of its exporters' columns in schema order
    assert EXPORTS.get("apex").reads == {
        "nodes": (
            "node_id",
            "run_id",
            "question_id",
            "parent_id",
            "path",
            "strategy",
            "kind",
            "text",
            "parsed",
            "is_format_error",
        ),
        "questions": ("question_id", "question", "golden_answers"),
        "plans": ("plan_id", "run_id", "question_id", "source", "steps"),
        "plan_scores": ("plan_id", "f1"),
    }
    assert all(EXPORTS.get(name).exporters for name in STRATEGIES.names())


def test_a_strategy_without_exporters_exports_nothing():
    assert EXPORTS.get("toy") == StrategyExports("toy")
    assert EXPORTS.get("toy").export({}, None, 0) == {}


def test_exporters_declare_what_they_read_and_get_only_that():
    with pytest.raises(ValueError, match=r"exporter of 'x' reads \['passages'\]"):
        Exporter("x", {"passages": ("text",)}, _rows)
    with pytest.raises(ValueError, match=r"exporter of 'x' reads columns \['answer'\] of 'questions'"):
        Exporter("x", {"questions": ("question_id", "answer")}, _rows)
    with pytest.raises(ValueError, match=r"exporter of 'x' reads columns \(none\) of 'nodes'"):
        Exporter("x", {"nodes": ()}, _rows)
    exports = StrategyExports("s", (Exporter("sft_examples", {"nodes": ("node_id",)}, _rows),))
    assert exports.export({"nodes": [{}, {}]}, None, 0) == {"sft_examples": [{"n": 2}]}
    with pytest.raises(ValueError, match=r"strategy 's': export inputs lack \['nodes'\]"):
        exports.export({"questions": []}, None, 0)


def test_registered_holds_exporters_for_the_block_only_and_refuses_a_second_entry():
    registry = ExportRegistry([StrategyExports("a")])
    with pytest.raises(ValueError, match="exporters of strategy 'a' are already registered"):
        registry.register(StrategyExports("a"))
    toy = StrategyExports("toy", (Exporter("sft_examples", {"nodes": ("node_id",)}, _rows),))
    with EXPORTS.registered(toy):
        assert EXPORTS.get("toy") is toy
    assert EXPORTS.get("toy").exporters == ()
