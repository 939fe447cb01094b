"""Bundled questions expanded by a registered strategy with the embedded model (slow tests).

The real SmolLM2-135M on CPU behind a plain batcher, BM25 over every bundled paragraph of the
dataset, and the shard runner a build uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.retrieval.bm25 import BM25Retriever
from ragfactory.tasks.search.shard import expand_shard
from ragfactory.tasks.search.tree import TableRows
from ragfactory.warehouse.store import conform


def expand_bundled(strategy: str, question_ids: Sequence[str], config: object, model: Path,
                   dataset: str = "hotpotqa") -> tuple[list[dict], TableRows]:
    """(the questions, the rows) of ``strategy`` over ``question_ids`` of a bundled ``dataset``."""
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    data = load_bundled(dataset)
    questions = [q for q in data.questions if q["question_id"] in question_ids]
    retriever = BM25Retriever.build(conform("passages", data.passages))
    batcher = Batcher(TransformersBackend(model, TransformersSettings(device="cpu")))
    rows = asyncio.run(expand_shard(strategy, questions, batcher, retriever, config, f"{strategy}-slow", 0,
                                    len(questions)))
    return questions, rows
