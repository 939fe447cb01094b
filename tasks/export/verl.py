"""verl RL data: the parquet verl's Search-R1 recipe reads (TreePS-RAG, App. C.2).

TreePS-RAG trained with verl. Its Search-R1 data (``scripts/data_process/nq_search.py`` of
Search-R1) has one row per question with five columns, typed as follows:

    data_source   string                      "searchR1_<dataset>"; selects the rule reward (e.g.
                                              "searchR1_nq", "searchR1_hotpotqa")
    prompt        list<struct<role: string,   the chat prompt: [{"role": "user",
                              content: string>>  "content": <Search-R1 template with question>}]
    ability       string                      "fact-reasoning"
    reward_model  struct<style: string,       {"style": "rule",
                         ground_truth: struct<  "ground_truth": {"target": [golden answers]}}
                           target: list<string>>>
    extra_info    struct<split: string, index: int64, question_id: string, run_id: string,
                         strategy: string, node_ids: list<string>>

A strategy's exporter (TreePS-RAG's, in its folder) gives ``verl_prompts`` rows (those five plus
prompt_id, run_id and question_id for the warehouse);
``write_verl_parquet`` writes the five columns alone as the file
``data.train_files`` points at.

The reward is stock verl's: ``verl.utils.reward_score.default_compute_score`` (verl 0.9.1) scores
the seven ``searchR1_<dataset>`` names of ``SEARCH_R1_DATASETS`` with Search-R1's exact match of
the last ``<answer> … </answer>`` against ``target``, the tag the TreePS-RAG prompts ask for. Any other
dataset's rows score through ``tasks/rewards/verl_reward.py`` (the same rule for every ``searchR1_``
name), which ``reward_overrides`` names in ``reward.custom_reward_function`` overrides for ``main_ppo``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ragfactory.schemas.tables import VERL_COLUMNS
from ragfactory.warehouse.integrity import committed
from ragfactory.warehouse.store import conform, write_parquet

ABILITY = "fact-reasoning"  # Search-R1's value for its QA datasets
REWARD_STYLE = "rule"  # exact match against ``target``, Search-R1's qa_em reward
DATA_SOURCE_PREFIX = "searchR1_"  # the prefix of verl's Search-R1 reward names
# The datasets verl 0.9.1's default_compute_score scores as searchR1_<name>, no user code needed.
SEARCH_R1_DATASETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
ANSWER_TAG = "<answer>"  # what search_r1_like_qa_em parses; every prompt must ask for it
# verl loads it by path (it imports nothing of ragfactory)
REWARD_MODULE = Path(__file__).parents[1] / "rewards" / "verl_reward.py"


def data_source(dataset: str | None) -> str:
    """The verl ``data_source`` of a dataset: ``searchR1_<dataset>``."""
    return DATA_SOURCE_PREFIX + str(dataset or "unknown")


def reward_overrides(data_sources: Iterable[str]) -> list[str]:
    """``main_ppo`` overrides the rows need beyond stock verl: none when every data source is one
    verl scores, else the shipped reward module as ``custom_reward_function``."""
    stock = {data_source(name) for name in SEARCH_R1_DATASETS}
    if set(data_sources) <= stock:
        return []
    return [f"reward.custom_reward_function.path={REWARD_MODULE}", "reward.custom_reward_function.name=compute_score"]


def write_verl_parquet(
    rows: pa.Table | Iterable[Mapping[str, Any]], path: str | os.PathLike, root: Path | None = None
) -> Path:
    """Write the five verl columns of ``verl_prompts`` rows to ``path`` (atomically); under a
    warehouse ``root``, with its manifest entry (``warehouse.exported``)."""
    table = conform("verl_prompts", rows).select(list(VERL_COLUMNS))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with committed(path, root, table.num_rows) as tmp:
        write_parquet(table, tmp)
    return path


def verl_command(path: str | os.PathLike) -> str:
    """The ``main_ppo`` data overrides for the verl parquet at ``path``, with the reward overrides
    its data sources need (none for stock verl's datasets)."""
    sources = pq.read_table(path, columns=["data_source"]).column("data_source").to_pylist()
    overrides = [f"data.train_files={path}", "data.prompt_key=prompt", *reward_overrides(sources)]
    return "python -m verl.trainer.main_ppo " + " ".join(overrides)
