"""The flows' parameters (flows/config.py) and the package boundary of schemas/.

Pure tests of pydantic models: they live beside test_layering.py rather than in tests/flows/,
whose autouse fixture starts a Prefect server they do not need.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragfactory.flows.config import BuildConfig, TrainConfig, load_build_config
from ragfactory.tasks.llm.config import ENGINE_ENV
from ragfactory.tasks.training.config import TrainingRequest

REPO = Path(__file__).resolve().parents[1]

# The hashes of main before the config models left schemas/config.py. A build's run id and the
# cache keys of its tasks derive from config_hash, so a moved or reordered field, a renamed
# section or a changed default would rebuild every warehouse; change these only on purpose.
GOLDEN_HASHES = {
    "default": "d41fc43ab772d461",
    # changed on purpose when the demo took up ReasonRAG MCTS and R3-RAG (was cf5a6637a47f5ada);
    # call ids do not depend on the run id, so the other strategies' calls are still in the cache
    "configs/demo.yaml": "19656b490238e5db",
}


@pytest.fixture(autouse=True)
def _default_engine(monkeypatch):
    # the policy's backend defaults to $RAGFACTORY_ENGINE, which a GPU work pool sets
    monkeypatch.delenv(ENGINE_ENV, raising=False)


def test_default_build_config_hash_is_pinned():
    assert BuildConfig().config_hash() == GOLDEN_HASHES["default"]


def test_demo_config_hash_is_pinned():
    assert load_build_config(REPO / "configs/demo.yaml").config_hash() == GOLDEN_HASHES["configs/demo.yaml"]


def test_build_config_sections_keep_their_order():
    assert list(BuildConfig.model_fields) == [
        "name",
        "seed",
        "warehouse",
        "datasets",
        "partitions",
        "corpus",
        "retrieval",
        "llm",
        "search",
        "valuation",
        "export",
        "runner",
        "allow_downloads",
    ]


def test_a_default_valuation_section_leaves_the_hash_alone_and_any_other_changes_it():
    base = BuildConfig()
    assert BuildConfig(valuation={"strategies": None}).config_hash() == base.config_hash()
    assert BuildConfig(valuation={"metric": "f1"}).config_hash() != base.config_hash()
    assert BuildConfig(valuation={"strategies": []}).config_hash() != base.config_hash()


def test_valuation_values_only_strategies_the_build_expands():
    with pytest.raises(ValueError, match=r"valuation.strategies lists \['treeps'\]"):
        BuildConfig(valuation={"strategies": ["treeps"]})
    config = BuildConfig(search={"strategies": ["decex", "treeps"]}, valuation={"strategies": ["decex"]})
    assert config.valuation.values("decex", False) and not config.valuation.values("treeps", True)
    assert BuildConfig().valuation.values("treeps", True) and not BuildConfig().valuation.values("decex", False)


@pytest.mark.subprocess
def test_train_config_answers_what_a_training_run_reads():
    names = set(TrainingRequest.__annotations__) | {n for n in vars(TrainingRequest) if not n.startswith("_")}
    config = TrainConfig(method="sft", run_id="r")
    assert {n for n in names if not hasattr(config, n)} == set()


def _project_modules_loaded_by(statement: str) -> list[str]:
    code = (
        f"import sys; {statement}; "
        "print(__import__('json').dumps(sorted(m for m in sys.modules if m.startswith('ragfactory'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


@pytest.mark.parametrize("module", ["ragfactory.schemas", "ragfactory.schemas.tables", "ragfactory.schemas.errors"])
def test_schemas_import_nothing_of_ours(module):
    loaded = _project_modules_loaded_by(f"import {module}")
    assert all(m in {"ragfactory", "ragfactory.schemas"} or m.startswith("ragfactory.schemas.") for m in loaded), loaded
    assert module in loaded


@pytest.mark.parametrize(
    "method, options, message",
    [
        (
            "prm",
            {"heldout": 0.1},
            r"--method prm: unknown option\(s\) \['heldout'\]; known: heldout_fraction, max_length",
        ),
        ("tree-advantage", {"max_turns": 2}, r"unknown option\(s\) \['max_turns'\]; it takes none"),
        (
            "sft",
            {"top_k": 3},
            r"--method sft: unknown option\(s\) \['top_k'\]; it takes none of its own; every method's: trackers",
        ),
    ],
)
def test_a_training_option_the_method_does_not_read_is_refused(method, options, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(method=method, run_id="demo-0123", options=options)
    assert TrainConfig(method="grpo", run_id="demo-0123", options={"prm_model": "latest:prm"}).options
    assert TrainConfig(
        method="grpo-agentic", run_id="demo-0123", options={"grammar": "treeps_step", "metric": "cover_em"}
    ).options


def test_the_warehouse_root_is_not_in_the_config_hash():
    base = BuildConfig(name="x")
    assert BuildConfig(name="x", warehouse={"root": "/elsewhere"}).config_hash() == base.config_hash()
