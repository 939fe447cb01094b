"""verl RL data from TreePS-RAG trees: the parquet verl's Search-R1 recipe reads (004, App. C.2).

TreePS-RAG trained with verl. Its Search-R1 data (``scripts/data_process/nq_search.py`` of
Search-R1) has one row per question with five columns, typed as follows:

    data_source   string                      dataset name; selects the rule reward (e.g. "nq",
                                              "hotpotqa", "2wikimultihopqa", "musique")
    prompt        list<struct<role: string,   the chat prompt: [{"role": "user",
                              content: string>>  "content": <Search-R1 template with question>}]
    ability       string                      "fact-reasoning"
    reward_model  struct<style: string,       {"style": "rule",
                         ground_truth: struct<  "ground_truth": {"target": [golden answers]}}
                           target: list<string>>>
    extra_info    struct<split: string, index: int64, question_id: string, run_id: string,
                         strategy: string, node_ids: list<string>>

``verl_rows`` gives ``verl_prompts`` rows (those five plus prompt_id, run_id and question_id
for the warehouse); ``write_verl_parquet`` writes the five columns alone as the file
``data.train_files`` points at.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ragfactory.atomic import atomic_path
from ragfactory.schemas.tables import VERL_COLUMNS
from ragfactory.tasks.export.grpo import golden_list, question_rows, root_id, tree_question
from ragfactory.tasks.export.trajectories import tree_prompt
from ragfactory.tasks.search.tree import group_trees, stable_id
from ragfactory.warehouse.store import conform

ABILITY = "fact-reasoning"  # Search-R1's value for its QA datasets
REWARD_STYLE = "rule"  # exact match against ``target``, Search-R1's qa_em reward


def verl_rows(
    nodes_rows: Iterable[Mapping[str, Any]], questions: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One ``verl_prompts`` row per question tree in ``nodes_rows``, indexed in tree order."""
    by_id = question_rows(questions)
    rows = []
    for index, tree in enumerate(group_trees(nodes_rows).values()):
        question = tree_question(by_id, tree)
        rows.append({
            "prompt_id": stable_id("verl", tree.run_id, tree.question_id, tree.strategy),
            "run_id": tree.run_id,
            "question_id": tree.question_id,
            "data_source": str(question.get("dataset") or "unknown"),
            "prompt": [{"role": "user", "content": tree_prompt(tree)}],
            "ability": ABILITY,
            "reward_model": {"style": REWARD_STYLE, "ground_truth": {"target": golden_list(question)}},
            "extra_info": {
                "split": question.get("split"),
                "index": index,
                "question_id": tree.question_id,
                "run_id": tree.run_id,
                "strategy": tree.strategy,
                "node_ids": [root_id(tree)],
            },
        })
    return rows


def write_verl_parquet(rows: pa.Table | Iterable[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    """Write the five verl columns of ``verl_prompts`` rows to ``path`` (atomically)."""
    table = conform("verl_prompts", rows).select(list(VERL_COLUMNS))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path
