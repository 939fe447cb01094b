"""A DecEx-RAG branch's value R(s_t, a_t) (Eq. 1, §2.1): the mean score of its rollouts.

From the state a branch leads to, ``n_rollouts`` rollouts (``rollout.py``, Table 8) run to a
final answer. Each becomes a ``rollout_leaf`` node under the branch and a ``rollouts`` row whose
``rollout_id`` is that leaf's id; the branch's value (and reward) is the mean of their scores
under the configured ``metric``, its visits their count.
"""

from __future__ import annotations

import asyncio

from ragfactory.tasks.search.common import Expansion
from ragfactory.tasks.search.decex import history
from ragfactory.tasks.search.decex.config import DecExConfig
from ragfactory.tasks.search.decex.history import Step
from ragfactory.tasks.search.decex.rollout import RolloutResult, run_rollouts
from ragfactory.tasks.search.tree import Node, Rollout


async def value_branches(
    exp: Expansion, question: str, config: DecExConfig, branches: list[tuple[Node, tuple[Step, ...]]]
) -> None:
    """Value sibling branches together, so the batcher sees their rollouts side by side."""
    await asyncio.gather(*(value_branch(exp, question, config, node, steps) for node, steps in branches))


async def value_branch(exp: Expansion, question: str, config: DecExConfig, node: Node, steps: tuple[Step, ...]) -> None:
    """R(s_t, a_t) of Eq. 1: the mean score of ``n_rollouts`` rollouts from the branch's state."""
    prompt = history.rollout_prompt(question, steps)
    results = await run_rollouts(
        prompt,
        config.rollout_spec,
        exp.generator,
        exp.retriever,
        seed_of=lambda suffix: exp.seed(f"{node.path}/{suffix}"),
        tags=exp.tags(node.path),
    )
    rewards = [_record(exp, node, result, config.metric) for result in results]
    node.visits = len(rewards)
    node.value = node.reward = sum(rewards) / len(rewards)


def _record(exp: Expansion, node: Node, result: RolloutResult, metric: str) -> float:
    """One rollout as a ``rollout_leaf`` under the branch and a ``rollouts`` row; its reward."""
    scores = exp.scores(result.final_answer)
    reward = scores[metric]
    leaf = _add_leaf(exp, node, result, scores, reward)
    exp.tree.rollouts.append(
        Rollout(
            leaf.node_id,
            exp.tree.run_id,
            exp.tree.question_id,
            node.node_id,
            result.text,
            result.final_answer,
            scores["em"],
            scores["f1"],
            result.n_turns,
            list(result.call_ids),
            result.seed,
        )
    )
    return reward


def _add_leaf(exp: Expansion, node: Node, result: RolloutResult, scores: dict[str, float], reward: float) -> Node:
    parsed = {
        "final_answer": result.final_answer,
        "n_turns": result.n_turns,
        "truncated": result.truncated,
        **scores,
    }
    return exp.tree.add_child(
        node,
        f"r{result.index}",
        "rollout_leaf",
        result.text,
        parsed=parsed,
        passage_ids=list(result.passage_ids),
        llm_call_id=result.call_ids[0] or None,
        is_format_error=result.error is not None,
        format_error=result.error,
        is_leaf=True,
        reward=reward,
        visits=1,
        value=reward,
    )
