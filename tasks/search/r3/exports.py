"""R3-RAG's cold-start SFT data from its attempts (§3.2, Algorithm 2).

For the kept trajectory of each question (best-of-N, ``tasks/search/r3/expansion.py``), one
example per step: the input is the step's prompt — Fig. 6 with the question for the first step,
Fig. 7 with the earlier steps and their retrieved documents after it — and the output is the
step itself written in the required format ("The problem analysis: …" then "The retrieval
query: …" or "The final answer: …"). The documents appear only in inputs; the train flow's
assistant-only loss masks every input, as the paper's masking of retrieved documents requires.
Questions without a kept (correct) trajectory give no example. ``EXPORTS`` declares the table
with the columns it reads (``tasks/export/registry.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ragfactory.tasks.export.registry import Exporter, ExportInputs, Rows, StrategyExports, tree_columns
from ragfactory.tasks.export.sft import question_text, question_texts
from ragfactory.tasks.search.common import hits_from_records
from ragfactory.tasks.search.r3.config import STRATEGY
from ragfactory.tasks.search.r3.steps import Step, step_prompt, step_text
from ragfactory.tasks.search.tree import group_trees, path_key, stable_id


def _step(row: Mapping[str, Any]) -> Step:
    parsed = row["parsed"]
    if parsed.get("action") == "query":
        return Step(parsed["analysis"], query=parsed["content"], docs=tuple(hits_from_records(parsed.get("hits"))))
    return Step(parsed["analysis"], answer=parsed["content"])


def r3_sft_examples(nodes: Iterable[Mapping[str, Any]], questions: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``sft_examples`` rows: Algorithm 2 over every kept trajectory (module docstring)."""
    texts, rows = question_texts(questions), []
    for tree in group_trees(nodes).values():
        kept = sorted(
            (r for r in tree.rows.values() if r["kind"] != "question" and r["is_selected"]),
            key=lambda r: path_key(r["path"]),
        )
        if not kept:
            continue
        root = tree.rows[kept[0]["parent_id"]]
        question, doc_chars = question_text(texts, tree), root["parsed"].get("doc_chars", 512)
        steps = [_step(row) for row in kept]
        for k, (row, step) in enumerate(zip(kept, steps)):
            rows.append(
                {
                    "example_id": stable_id("r3-sft", tree.run_id, tree.question_id, row["node_id"]),
                    "run_id": tree.run_id,
                    "question_id": tree.question_id,
                    "strategy": tree.strategy,
                    "messages": [
                        {"role": "user", "content": step_prompt(question, steps[:k], doc_chars)},
                        {"role": "assistant", "content": step_text(step)},
                    ],
                    "node_ids": [r["node_id"] for r in kept[: k + 1]],
                }
            )
    return rows


def _sft(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return r3_sft_examples(inputs["nodes"], inputs["questions"])


EXPORTS = StrategyExports(
    STRATEGY,
    (
        Exporter(
            "sft_examples",
            {"nodes": tree_columns("parsed", "is_selected"), "questions": ("question_id", "question")},
            _sft,
        ),
    ),
)
