"""One shard of questions through one strategy: the unit a Prefect task runs and retries.

Questions run concurrently (``max_in_flight`` at a time) through the batcher, so the engine sees the
pending requests of every in-flight question as one batch (docs/architecture.md, "Core contracts").
The strategy is looked up in the registry (``tasks/search/registry.py``) and expands each question
in one ``ShardContext``; the rows come back ordered by question (each question's rows in the order
its strategy made them: nodes by path), so a rerun writes byte-identical shards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from ragfactory.progress import progress_bar
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.retrieval.ledger import asking
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.search.strategy import ShardContext, Strategy
from ragfactory.tasks.search.tree import TableRows

ShardRows = TableRows


def shard_name(strategy: str, index: int) -> str:
    return f"{strategy}-{index:04d}"


def split_shards(question_ids: Sequence[str], shard_size: int) -> list[list[str]]:
    """Consecutive chunks of ``shard_size`` ids, in the given order."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    return [list(question_ids[i : i + shard_size]) for i in range(0, len(question_ids), shard_size)]


async def expand_shard(
    strategy: str | Strategy,
    questions: Sequence[Mapping],
    batcher: Batcher,
    retriever: Retriever,
    config: object,
    run_id: str,
    run_seed: int,
    max_in_flight: int,
    scorer: Any = None,
) -> ShardRows:
    """Expand every question of the shard with ``strategy`` (the plug-in, resolved once by the
    caller, or its registered name); rows sorted by question.

    ``scorer`` is what the strategy's ``open_scorer`` built (None: none); it is flushed at the end.
    """
    plugin = strategy if isinstance(strategy, Strategy) else STRATEGIES.get(strategy)
    context = ShardContext(batcher, retriever, run_id, run_seed, scorer)
    with progress_bar() as bar:
        task = bar.add_task(f"{plugin.name}: questions expanded", total=len(questions))

        async def job(question: Mapping) -> tuple[str, TableRows]:
            with asking(str(question.get("question_id"))):  # the retrieval ledger's question
                rows = await plugin.expand(question, context, config)
            bar.advance(task)
            return str(question.get("question_id")), rows

        results = await batcher.run_all([partial(job, q) for q in questions], max_in_flight)
    merged = ShardRows()
    for _, rows in sorted(results, key=lambda result: result[0]):
        merged.extend(rows)
    if hasattr(scorer, "flush"):
        scorer.flush()
    return merged
