"""A strategy the library does not ship, for tests that register one (the build flow's, the
loadable exports'): the toy strategy answers each question with one greedy sample (a root and an
``answer`` node) and exports one SFT example per question."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.export.registry import Exporter, ExportInputs, StrategyExports
from ragfactory.tasks.llm.types import Message, Request, Sampling
from ragfactory.tasks.search.common import Expansion, question_fields
from ragfactory.tasks.search.strategy import ShardContext, Strategy
from ragfactory.tasks.search.tree import QuestionTree, TableRows, stable_id

GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=3).questions}


@dataclass(frozen=True)
class ToyConfig:
    """One greedy answer per question."""

    max_tokens: int = 32  # a short answer


async def expand_toy(question: Mapping[str, Any], context: ShardContext, config: ToyConfig) -> TableRows:
    question_id, text, golden = question_fields(question)
    tree = QuestionTree(context.run_id, question_id, "toy")
    root = tree.add_root(text)
    exp = Expansion(tree, golden, context.generator, context.retriever, context.run_seed)
    path = f"{root.path}/a"
    sampling = Sampling(max_tokens=config.max_tokens, seed=exp.seed(path))
    [completion] = await exp.sample(Request((Message("user", text),), sampling, "policy", exp.tags(path)))
    scores = exp.scores(completion.text)
    tree.add_child(
        root,
        "a0",
        "answer",
        completion.text,
        parsed=scores,
        llm_call_id=completion.call_id,
        is_leaf=True,
        reward=scores["em"],
    )
    return tree.table_rows()


def toy_sft(inputs: ExportInputs, config: Any, run_seed: int) -> list[dict]:
    answers = [n for n in inputs["nodes"] if n["kind"] == "answer"]
    texts = {q["question_id"]: q["question"] for q in inputs["questions"]}
    return [
        {
            "example_id": stable_id("toy-sft", n["run_id"], n["node_id"]),
            "run_id": n["run_id"],
            "question_id": n["question_id"],
            "strategy": "toy",
            "node_ids": [n["node_id"]],
            "messages": [
                {"role": "user", "content": texts[n["question_id"]]},
                {"role": "assistant", "content": n["text"]},
            ],
        }
        for n in answers
    ]


TOY = Strategy("toy", ToyConfig, expand_toy)
# the export task hands the exporter these columns only: reading one more would be a KeyError
TOY_EXPORTS = StrategyExports(
    "toy",
    (
        Exporter(
            "sft_examples",
            {"nodes": ("node_id", "run_id", "question_id", "kind", "text"), "questions": ("question_id", "question")},
            toy_sft,
        ),
    ),
)
