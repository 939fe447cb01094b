"""Bundled questions expanded by a registered strategy with the embedded model, and one training
step on what they export (slow tests).

The real SmolLM2-135M on CPU behind a plain batcher, BM25 over every bundled paragraph of the
dataset, and the shard runner a build uses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from ragfactory.flows.config import TrainConfig
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.retrieval.bm25 import BM25Retriever
from ragfactory.tasks.search.shard import expand_shard
from ragfactory.tasks.search.tree import TableRows
from ragfactory.tasks.training.runs import plan_training, train_planned
from ragfactory.warehouse.store import Warehouse, conform


def expand_bundled(
    strategy: str, question_ids: Sequence[str], config: object, model: Path, dataset: str = "hotpotqa"
) -> tuple[list[dict], TableRows]:
    """(the questions, the rows) of ``strategy`` over ``question_ids`` of a bundled ``dataset``."""
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    data = load_bundled(dataset)
    questions = [q for q in data.questions if q["question_id"] in question_ids]
    retriever = BM25Retriever.build(conform("passages", data.passages))
    batcher = Batcher(TransformersBackend(model, TransformersSettings(device="cpu")))
    rows = asyncio.run(
        expand_shard(strategy, questions, batcher, retriever, config, f"{strategy}-slow", 0, len(questions))
    )
    return questions, rows


def written_dataset(wh: Warehouse, table: str, rows: list[dict], shard: str):
    """``rows`` written to ``table`` of ``wh``, read back with ``datasets`` as a TRL job reads them."""
    import datasets

    wh.write(table, rows, shard)
    files = [str(path) for path in wh.files(table)]
    return datasets.load_dataset("parquet", data_files=files, split="train")


def train_one_step(wh: Warehouse, method: str, run_id: str, model: Path, max_length: int) -> dict:
    """One TRL step of ``method`` on ``run_id``'s export in ``wh``, through the train flow's functions."""
    config = TrainConfig(
        method=method,
        run_id=run_id,
        base_model=str(model),
        trl={"max_steps": 1, "per_device_train_batch_size": 1, "learning_rate": 1e-5, "max_length": max_length},
    )
    plan = plan_training(wh, config)
    return train_planned(wh, config, plan, logging.getLogger(run_id))
