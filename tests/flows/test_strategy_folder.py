"""A sixth strategy that is nothing but a folder: its plug-in, its exporters and its SQL view.

The folder (written here into a temporary directory, as a package the library does not ship)
holds what a shipped strategy's folder holds: ``plugin.py`` (the ``Strategy``, naming its
``exports``, ``training`` and ``evaluation`` modules, its ``views/`` and ``prompts/`` and its
``explain`` hook), ``exports.py`` (its ``EXPORTS``), ``training.py`` (a reward, ``REWARDS``),
``evaluation.py`` (a mode, ``MODES``, and its grammar, ``GRAMMARS``), ``fates.py`` (why its nodes
were kept), ``prompts/toy_answer.txt|lark`` and ``views/toy_answers.sql``. Registering its plug-in
in the strategy registry, the one line a shipped strategy adds to ``tasks/search/registry.py``, is
all it takes: the build expands it (each question answered with its first gold answer, so the
engine is never asked), the export stage finds its exporter, the catalog shows its view, a
training names its reward, an evaluation its mode, the prompt loader its prompt and grammar, and
the dashboard's node panel its explanation.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.warehouse.catalog import query, sql_views
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm

PACKAGE = "ragfactory_toy_strategy"
FOLDER = {
    "__init__.py": '"""A toy strategy: one greedy answer per question."""\n',
    "plugin.py": """
from dataclasses import dataclass
from pathlib import Path

from ragfactory.tasks.search.common import question_fields
from ragfactory.tasks.search.strategy import Strategy
from ragfactory.tasks.search.tree import QuestionTree

from ragfactory_toy_strategy.fates import explain


@dataclass(frozen=True)
class GoldConfig:
    answer: int = 0


async def expand(question, context, config):
    question_id, text, golden = question_fields(question)
    tree = QuestionTree(context.run_id, question_id, "toy")
    tree.add_child(tree.add_root(text), "a0", "answer", golden[config.answer], is_leaf=True, reward=1.0)
    return tree.table_rows()


TOY = Strategy("toy", GoldConfig, expand, exports=f"{__package__}.exports",
               views=Path(__file__).parent / "views", training=f"{__package__}.training",
               evaluation=f"{__package__}.evaluation", explain=explain,
               prompts=Path(__file__).parent / "prompts")
""",
    "fates.py": """
def explain(node, siblings, state):
    return "kept: the dataset's first gold answer" if node.get("kind") == "answer" else None
""",
    "prompts/toy_answer.txt": "Answer in a few words.\n\nQuestion: {question}\n",
    "prompts/toy_answer.lark": "start: short_answer\nshort_answer[max_tokens=12]: /[^<>\\n]*[^<>\\s][^<>\\n]*/\n",
    "exports.py": """
from ragfactory.tasks.export.registry import Exporter, StrategyExports
from ragfactory.tasks.search.tree import stable_id


def sft(inputs, config, run_seed):
    texts = {q["question_id"]: q["question"] for q in inputs["questions"]}
    return [{
        "example_id": stable_id("toy-sft", n["run_id"], n["node_id"]), "run_id": n["run_id"],
        "question_id": n["question_id"], "strategy": "toy", "node_ids": [n["node_id"]],
        "messages": [{"role": "user", "content": texts[n["question_id"]]},
                     {"role": "assistant", "content": n["text"]}],
    } for n in inputs["nodes"] if n["kind"] == "answer"]


EXPORTS = StrategyExports("toy", (Exporter(
    "sft_examples", {"nodes": ("node_id", "run_id", "question_id", "kind", "text"),
                     "questions": ("question_id", "question")}, sft),))
""",
    "training.py": """
def answer_length(context):
    def toy_length(prompts, completions, **columns):  # TRL logs rewards/toy_length/mean
        return [min(len(str(c)), 10) / 10 for c in completions]

    return toy_length


REWARDS = {"toy_length": answer_length}
""",
    "evaluation.py": """
from ragfactory.tasks.eval.inference import Outcome


async def gold(question, generator, retriever, config):
    return Outcome(prediction=question.golden_answers[0])


MODES = {"toy_gold": gold}
GRAMMARS = {"toy_gold": ("toy_answer",)}
""",
    "views/toy_answers.sql": "select question_id, text as answer, reward from nodes "
    "where strategy = 'toy' and kind = 'answer'\n",
}
GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=3).questions}


@pytest.fixture
def toy_folder(tmp_path):
    """The folder as an importable package, its plug-in registered for the test."""
    root = tmp_path / PACKAGE
    for rel, text in FOLDER.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    spec = importlib.util.spec_from_file_location(PACKAGE, root / "__init__.py", submodule_search_locations=[str(root)])
    sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[PACKAGE])
    try:
        plugin = importlib.import_module(f"{PACKAGE}.plugin")
        with STRATEGIES.registered(plugin.TOY):
            yield root
    finally:
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def test_a_strategy_folder_builds_exports_and_shows_its_view(tmp_path, toy_folder, engines):
    engines(ScriptedBackend())
    root = tmp_path / "wh"
    summary = build(
        BuildConfig.model_validate(
            {
                "name": "toy-folder",
                "warehouse": {"root": str(root)},
                "datasets": [{"name": "hotpotqa", "limit": 3}],
                "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
                "retrieval": {"dense": {"enabled": False}},
                "llm": scripted_llm(),
                "search": {"strategies": ["toy"], "shard_size": 3},
            }
        )
    )
    assert summary["status"] == "completed", summary
    assert summary["exports"] == [{"strategy": "toy", "sft_examples": 3, "contaminated": 0}]
    wh = Warehouse(root)
    answers = query(wh, "select answer, reward from toy_answers order by answer").to_pylist()
    assert answers == [{"answer": a, "reward": 1.0} for a in sorted(GOLD.values())]
    examples = query(wh, "select messages from sft_examples").to_pylist()
    assert sorted(e["messages"][1]["content"] for e in examples) == sorted(GOLD.values())


def test_a_strategy_view_leaves_the_catalog_with_its_strategy(toy_folder):
    assert "toy_answers" in sql_views()
    STRATEGIES.unregister("toy")
    assert "toy_answers" not in sql_views()
    assert {"decex_layers", "treeps_tree", "apex_plans", "mcts_tree", "r3_trajectories"} <= set(sql_views())


def test_a_strategy_folder_adds_its_reward_and_evaluation_mode(toy_folder):
    import asyncio
    from types import SimpleNamespace

    from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig
    from ragfactory.tasks.eval.runner import answer_questions, eval_modes
    from ragfactory.tasks.llm.batcher import Batcher
    from ragfactory.tasks.training.rewards import declared_rewards, run_rewards

    [reward] = run_rewards(SimpleNamespace(rewards=["toy_length"], rows=[]))
    assert (reward.__name__, reward(["q", "q"], ["abcd", "a" * 30])) == ("toy_length", [0.4, 1.0])
    questions = [EvalQuestion("q1", "Who?", ("Ada", "Lovelace")), EvalQuestion("q2", "Where?", ("Paris",))]
    outcomes = asyncio.run(
        answer_questions(questions, ["toy_gold"], Batcher(ScriptedBackend()), None, InferenceConfig(), 2)
    )
    assert [o.prediction for o in outcomes["toy_gold"]] == ["Ada", "Paris"]
    STRATEGIES.unregister("toy")
    assert "toy_gold" not in eval_modes() and "toy_length" not in declared_rewards()


def test_a_strategy_folder_adds_its_prompts_grammars_and_explanations(toy_folder):
    from ragfactory.dashboard.fates import fate
    from ragfactory.tasks.eval.inference import check_max_tokens, mode_grammars
    from ragfactory.tasks.llm.grammar import GrammarError
    from ragfactory.tasks.prompts.loader import load_grammar, load_prompt, render_prompt

    assert render_prompt("toy_answer", question="Who?").endswith("Question: Who?\n")
    assert "short_answer" in load_grammar("toy_answer", 32).text
    assert mode_grammars()["toy_gold"] == ("toy_answer",)
    with pytest.raises(GrammarError, match="evaluation max_tokens=1"):
        check_max_tokens(["toy_gold"], 1)
    node = {"node_id": "n1", "parent_id": "q", "kind": "answer", "strategy": "toy", "is_selected": True}
    assert fate(node, []) == "kept: the dataset's first gold answer"
    STRATEGIES.unregister("toy")
    with pytest.raises(KeyError, match="unknown prompt 'toy_answer'"):
        load_prompt("toy_answer")
    assert fate(node, []) == "kept: a step on a kept branch"
