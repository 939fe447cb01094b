"""One shard of questions through one strategy: the unit a Prefect task runs and retries.

Questions run concurrently (``max_in_flight`` at a time) through the batcher, so the engine
sees the pending requests of every in-flight question as one batch (DESIGN.md "Core contracts").
The rows come back ordered by question and path, so a rerun writes byte-identical shards.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial

from ragfactory.progress import progress_bar
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.search.apex import expansion as apex
from ragfactory.tasks.search.decex import expansion as decex
from ragfactory.tasks.search.treeps import expansion as treeps
from ragfactory.tasks.search.tree import QuestionTree, TableRows

Expander = Callable[..., Awaitable[QuestionTree]]
STRATEGIES: dict[str, Expander] = {
    "decex": decex.expand_question,
    "treeps": treeps.expand_question,
}


ShardRows = TableRows


def shard_name(strategy: str, index: int) -> str:
    return f"{strategy}-{index:04d}"


def split_shards(question_ids: Sequence[str], shard_size: int) -> list[list[str]]:
    """Consecutive chunks of ``shard_size`` ids, in the given order."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    return [list(question_ids[i : i + shard_size]) for i in range(0, len(question_ids), shard_size)]


async def expand_shard(
    strategy: str,
    questions: Sequence[Mapping],
    batcher: Batcher,
    retriever: Retriever,
    config: object,
    run_id: str,
    run_seed: int,
    max_in_flight: int,
    scorer: object = None,
) -> ShardRows:
    """Expand every question of the shard; rows sorted by (question, path).

    APEX plans, scores plans with ``scorer`` (SEPR) and executes them, filling plans too.
    """
    if strategy == apex.STRATEGY:
        result = await apex.run_apex_shard(
            questions, batcher, retriever, scorer, config, run_id, run_seed, max_in_flight
        )
        return result
    try:
        expand = STRATEGIES[strategy]
    except KeyError:
        known = sorted([*STRATEGIES, apex.STRATEGY])
        raise ValueError(f"unknown strategy {strategy!r}; known: {known}") from None
    with progress_bar() as bar:
        task = bar.add_task(f"{strategy}: questions expanded", total=len(questions))

        async def job(question: Mapping) -> QuestionTree:
            tree = await expand(question, batcher, retriever, config, run_id, run_seed)
            bar.advance(task)
            return tree

        trees = await batcher.run_all([partial(job, q) for q in questions], max_in_flight)
    rows = ShardRows()
    for tree in sorted(trees, key=lambda t: t.question_id):
        rows.nodes.extend(tree.node_rows())
        rows.rollouts.extend(tree.rollout_rows())
    return rows
