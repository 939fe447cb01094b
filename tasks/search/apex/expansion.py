"""APEX-Searcher: sampled plans scored by SEPR, then executed plan by plan (§2.2, §2.4).

One question, ``run_apex_question``:

1. Planning (§2.2.2, §2.4.1): the planner prompt (``apex_plan``) is sampled ``n_plans`` times
   (G, one request with ``n``) and each output parsed into a ``plans`` row (source "planner").
   The gold plan, when the question has one (MuSiQue's decomposition, or a user field), becomes
   a ``plans`` row too (source "gold"), its symbolic steps rewritten into questions
   (``plan_rewrite``: templates by default, the LLM as an option) beside their original text.
2. SEPR (§2.2.1): each parsed planner plan against the gold plan, a ``plan_scores`` row with
   precision, recall, F1, tau and the matched pairs; a malformed plan scores 0.
3. Execution (§2.4.2-2.4.3, Algorithm 2 in ``apex.execute``): the ``n_execute`` best-scoring
   well-formed plans (the first ones when there is no gold plan), and the gold plan when
   ``execute_gold``; when no sampled plan is well formed, the question itself runs as a
   one-step plan under the first plan's node ("falls back to treating Q as a single-step task").

Every plan is a ``plan`` node under the question root (planner plans ``q/p<i>``, the gold plan
``q/g``), and a plan's ``plan_id`` is its node id, so SQL joins ``plans``, ``plan_scores`` and
``nodes`` on it. A planner plan node's ``reward`` is its SEPR F1; each execution is a chain
beneath its plan node ending in an ``answer`` node whose reward is the configured metric.
The strategy writes no ``rollouts``.

``plugin.py`` registers the strategy: the shard runner passes the plan scorer in the shard
context, and the strategy fills ``plans`` and ``plan_scores`` besides ``nodes``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from ragfactory.tasks.llm.seeds import derive_seed
from ragfactory.tasks.llm.types import Completion, Generator, Message, Request, Sampling
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.rewards.sepr import PlanMatch, PlanScorer, plan_score_row
from ragfactory.tasks.search.apex.config import STRATEGY, ApexConfig
from ragfactory.tasks.search.apex.execute import Execution, execute_plan
from ragfactory.tasks.search.apex.plan_format import (
    PLAN_STOP,
    ParsedPlan,
    PlanStep,
    gold_plan_texts,
    parse_plan,
    planner_prompt,
)
from ragfactory.tasks.search.apex.plan_rewrite import references, rewrite_steps, rewrite_steps_with_llm
from ragfactory.tasks.search.common import question_fields, request_tags, sample_n
from ragfactory.tasks.search.tree import Node, QuestionTree, TableRows

SeedOf = Callable[[str], int]  # a node path -> its sampling seed


ApexResult = TableRows  # plans, plan_scores, nodes and rollouts of a question or shard


@dataclass
class _Plan:
    """A plan while the question runs: its node, parsed steps and SEPR."""

    node: Node
    source: str
    parsed: ParsedPlan
    llm_call_id: str | None = None
    match: PlanMatch | None = None


async def run_apex_question(
    question: Mapping,
    generator: Generator,
    retriever: Retriever,
    scorer: PlanScorer | None,
    config: ApexConfig,
    run_id: str,
    run_seed: int,
) -> ApexResult:
    """Plan, score and execute one ``questions`` row; its plans, plan_scores and nodes rows.

    ``scorer`` None skips SEPR (plans are then executed in sampled order).
    """
    question_id, text, golden = question_fields(question)
    tree = QuestionTree(run_id, question_id, STRATEGY)
    root = tree.add_root(text, parsed={"golden_answers": golden})
    seed_of = partial(derive_seed, run_seed, question_id)
    sampled, gold = await asyncio.gather(
        _sample_plans(tree, root, text, generator, config, seed_of),
        _gold_plan(tree, root, question, generator, config, seed_of),
    )
    if gold is not None and scorer is not None:
        await _score(sampled, gold, scorer)
    run = Execution(tree, golden, generator, retriever, config.exec_spec, run_seed)
    await asyncio.gather(
        *(execute_plan(run, plan.node, steps, text) for plan, steps in _executions(sampled, gold, text, config))
    )
    plans = [_plan_row(plan) for plan in sampled + ([gold] if gold else [])]
    scores = [
        plan_score_row(p.node.node_id, run_id, question_id, gold.node.node_id, p.match, scorer.embedder_name)
        for p in sampled
        if p.match is not None
    ]
    return ApexResult(nodes=tree.node_rows(), rollouts=tree.rollout_rows(), plans=plans, plan_scores=scores)


def plan_request(
    question: str, question_id: str, path: str, config: ApexConfig, n: int, temperature: float, seed: int
) -> Request:
    """The planner's request for ``question``: ``n`` plans at ``temperature``, each held to the
    plan grammar within ``config.plan_max_tokens`` and stopped at ``</plan>``: a build's G
    samples, or an evaluation's one greedy plan (``evaluation.py``)."""
    sampling = Sampling(
        n=n,
        temperature=temperature,
        max_tokens=config.plan_max_tokens,
        stop=PLAN_STOP,
        seed=seed,
        grammar=config.plan_grammar,
    )
    prompt = planner_prompt(question, config.max_steps)
    return Request((Message("user", prompt),), sampling, config.planner_role, request_tags(question_id, path))


async def _sample_plans(
    tree: QuestionTree, root: Node, question: str, generator: Generator, config: ApexConfig, seed_of: SeedOf
) -> list[_Plan]:
    """G planner samples as one request, each a ``plan`` node."""
    path = f"{root.path}/p"
    request = plan_request(
        question, tree.question_id, path, config, config.n_plans, config.plan_temperature, seed_of(path)
    )
    completions: list[Completion] = await sample_n(generator, request)
    plans = []
    for i, completion in enumerate(completions):
        parsed = parse_plan(completion.text, config.max_steps)
        node = tree.add_child(
            root,
            f"p{i}",
            "plan",
            completion.text,
            parsed={"source": "planner", **_steps_parsed(parsed)},
            llm_call_id=completion.call_id or None,
            is_format_error=parsed.error is not None,
            format_error=parsed.error,
        )
        plans.append(_Plan(node, "planner", parsed, completion.call_id or None))
    return plans


async def _gold_plan(
    tree: QuestionTree,
    root: Node,
    question: Mapping,
    generator: Generator,
    config: ApexConfig,
    seed_of: SeedOf,
) -> _Plan | None:
    originals = gold_plan_texts(question, config.gold_plan_field)
    if not originals:
        return None
    if config.rewrite == "llm":
        rewritten = await rewrite_steps_with_llm(
            originals, generator, config.rewrite_role, lambda i: seed_of(f"{root.path}/g/rewrite{i}")
        )
    else:
        rewritten = rewrite_steps(originals)
    pairs = enumerate(zip(rewritten, originals), start=1)
    steps = tuple(PlanStep(i, q, original, tuple(references(q))) for i, (q, original) in pairs)
    parsed = ParsedPlan(steps)
    text = "\n".join(f"{s.step}. {s.original}" for s in steps)
    node = tree.add_child(root, "g", "plan", text, parsed={"source": "gold", **_steps_parsed(parsed)})
    return _Plan(node, "gold", parsed)


def _steps_parsed(parsed: ParsedPlan) -> dict[str, Any]:
    return {"steps": [step.row() for step in parsed.steps], "n_steps": len(parsed.steps)}


async def _score(sampled: list[_Plan], gold: _Plan, scorer: PlanScorer) -> None:
    """SEPR of every sampled plan (0 for a malformed one), off the event loop."""
    valid = [p for p in sampled if p.parsed.error is None]
    pairs = [(p.parsed.questions, gold.parsed.questions) for p in valid]
    matches = await asyncio.to_thread(scorer.score_many, pairs) if pairs else []
    for plan, match in zip(valid, matches):
        plan.match = match
    for plan in sampled:
        plan.match = plan.match or PlanMatch(0.0, 0.0, 0.0, scorer.config.tau)
        plan.node.reward = plan.match.f1
        plan.node.parsed.update(precision=plan.match.precision, recall=plan.match.recall, f1=plan.match.f1)


def _executions(
    sampled: list[_Plan], gold: _Plan | None, question: str, config: ApexConfig
) -> list[tuple[_Plan, list[str]]]:
    """(plan, sub-questions) to execute: the best valid samples, the fallback, the gold plan."""
    valid = [p for p in sampled if p.parsed.error is None]
    valid.sort(key=lambda p: -(p.match.f1 if p.match else 0.0))  # stable: sampled order breaks ties
    chosen = [(p, p.parsed.questions) for p in valid[: config.n_execute]]
    if not valid and sampled and config.n_execute:
        sampled[0].node.parsed["fallback"] = True
        chosen.append((sampled[0], [question]))
    if gold is not None and config.execute_gold:
        chosen.append((gold, gold.parsed.questions))
    for plan, _ in chosen:
        plan.node.is_selected = True
    return chosen


def _plan_row(plan: _Plan) -> dict[str, Any]:
    node = plan.node
    return {
        "plan_id": node.node_id,
        "run_id": node.run_id,
        "question_id": node.question_id,
        "source": plan.source,
        "steps": [step.row() for step in plan.parsed.steps],
        "text": node.text,
        "is_format_error": plan.parsed.error is not None,
        "format_error": plan.parsed.error,
        "llm_call_id": plan.llm_call_id,
    }
