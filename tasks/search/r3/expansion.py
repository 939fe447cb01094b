"""R3-RAG cold start of one question: attempts, best-of-N, judged process rewards.

1. ``n_attempts`` trajectories are generated concurrently, attempt i at ``temperatures[i]``
   (the first greedy). Each follows Algorithm 1: step j's prompt is Fig. 6 (j = 1) or Fig. 7
   with the previous steps (``steps.py``), held to the ``r3_step`` grammar; a step that answers
   ends the trajectory; a query retrieves the top-k passages not seen earlier in the trajectory;
   a step with neither is a format error and ends it; a query at step ``max_iterations`` ends it
   as a failure; the first ``min_queries`` steps are held to a query (``r3_query``), and with
   ``answer_at_limit`` the last one to an answer (``r3_answer``). Every
   step is a ``nodes`` row (``sub_query`` or ``answer``); the first step of
   attempt i sits at ``q/a<i>``, the next ones below it (``…/s2``, ``…/s3``).
2. Outcome (Eq. 2): an answer is correct when it matches a gold answer (``metric``) or, failing
   that, when the ``judge`` role says it means the same (``judge_outcome``).
3. Best-of-N (Appendix A): of the correct trajectories, the one with the fewest steps is kept
   (the earliest attempt on a tie): its nodes are selected; every attempt's nodes carry its
   ``outcome``, ``scale`` (λ_T) and ``kept`` / ``reason`` in ``parsed``.
4. Rewards, ``rewards`` rows per step (Eqs. 3-4): ``relevance`` of each query's documents to
   the original question, judged on 0, 0.1, …, 1; ``format`` 0, or ``format_penalty`` for the
   malformed step; ``process`` = relevance + format, scaled by λ_T = γ_correct, γ_incorrect or
   γ_fail by the trajectory's outcome (1 for a trajectory with a format error); ``outcome``
   (1 or 0) on the answer step.

Relevance verdicts are requested as soon as a query's documents are in, beside the trajectory's
next step, so judge calls share engine batches with policy steps. Seeds follow node paths.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from ragfactory.tasks.llm.types import Completion, Message, Request, Sampling
from ragfactory.tasks.prompts.loader import load_grammar
from ragfactory.tasks.retrieval.types import Hit, Retriever
from ragfactory.tasks.search.common import Expansion, hit_record, question_fields, retrieve
from ragfactory.tasks.search.r3.config import STRATEGY, R3Config
from ragfactory.tasks.search.r3.judges import (
    judge_request,
    outcome_values,
    parse_outcome,
    parse_relevance,
    relevance_values,
)
from ragfactory.tasks.search.r3.steps import Step, parse_step, step_prompt
from ragfactory.tasks.search.strategy import ShardContext
from ragfactory.tasks.search.tree import Node, QuestionTree, TableRows, stable_id


@dataclass
class Verdict:
    """A judged reward: its value, the judge's call and whether the verdict read."""

    value: float
    call_id: str | None = None
    error: str | None = None


@dataclass
class Attempt:
    index: int
    nodes: list[Node] = field(default_factory=list)
    relevance: dict[str, asyncio.Task] = field(default_factory=dict)  # node id -> Verdict task
    outcome: str = "fail"
    verdict: Verdict | None = None  # the outcome reward of the answer step


@dataclass
class _Attempts(Expansion):
    config: R3Config = R3Config()

    async def step(self, path: str, steps: list[Step], temperature: float) -> Completion:
        cfg = self.config
        if len(steps) < cfg.min_queries:
            name = "r3_query"
        elif cfg.answer_at_limit and len(steps) + 1 == cfg.max_iterations:
            name = "r3_answer"
        else:
            name = "r3_step"
        grammar = load_grammar(name, cfg.max_tokens, "R3Config.max_tokens")
        sampling = Sampling(temperature=temperature, max_tokens=cfg.max_tokens, seed=self.seed(path), grammar=grammar)
        prompt = step_prompt(self.tree.nodes[0].text, steps, cfg.doc_chars)
        return (await self.sample(Request((Message("user", prompt),), sampling, cfg.role, self.tags(path))))[0]

    async def attempt(self, index: int) -> Attempt:
        """Algorithm 1 for one trajectory (module docstring, 1-2)."""
        cfg, run = self.config, Attempt(index)
        parent, steps, seen = self.tree.nodes[0], [], set()
        temperature = cfg.temperature(index)
        for number in range(1, cfg.max_iterations + 1):
            segment = f"a{index}" if number == 1 else f"s{number}"
            completion = await self.step(f"{parent.path}/{segment}", steps, temperature)
            turn = parse_step(completion.text)
            action, content = turn.get("action"), turn.get("content")
            node = self.tree.add_child(
                parent,
                segment,
                "answer" if action == "answer" and not turn.error else "sub_query",
                completion.text,
                parsed={"attempt": index, "step": number, "temperature": temperature, **turn.fields},
                llm_call_id=completion.call_id or None,
                is_format_error=turn.error is not None,
                format_error=turn.error,
            )
            run.nodes.append(node)
            if turn.error:
                run.outcome = "format"
                break
            if action == "answer":
                run.verdict = await self.judge_outcome(node, content)
                run.outcome = "correct" if run.verdict.value == 1.0 else "incorrect"
                break
            hits = await self.retrieve_unseen(content, seen)
            node.passage_ids, node.parsed["hits"] = [h.passage_id for h in hits], [hit_record(h) for h in hits]
            run.relevance[node.node_id] = asyncio.create_task(self.judge_relevance(node, hits))
            steps.append(Step(turn.get("analysis"), query=content, docs=tuple(hits)))
            parent = node
        return run

    async def retrieve_unseen(self, query: str, seen: set[str]) -> list[Hit]:
        return await retrieve_unseen(self.retriever, query, self.config.top_k, seen)

    async def judge_outcome(self, node: Node, answer: str) -> Verdict:
        """Eq. 2: 1 if the answer matches a gold answer or the judge says it is equivalent."""
        scores = self.scores(answer)
        node.parsed.update(scores)
        if scores[self.config.metric] == 1.0:
            node.parsed["correct_by"] = "match"
            return Verdict(1.0)
        if not self.config.judge_outcome:
            return Verdict(0.0)
        values = outcome_values(self.tree.nodes[0].text, self.golden, answer)
        completion = await self.judge("r3_outcome_judge", values, f"{node.path}/o")
        verdict = parse_outcome(completion.text)
        if verdict:
            node.parsed["correct_by"] = "judge"
        error = None if verdict is not None else "no readable 'So the predicted answer is correct' verdict"
        return Verdict(1.0 if verdict else 0.0, completion.call_id or None, error)

    async def judge_relevance(self, node: Node, hits: list[Hit]) -> Verdict:
        """Eq. 3: the judge's relevance of the documents to the original question."""
        if not self.config.judge_relevance or not hits:
            return Verdict(0.0)
        values = relevance_values(self.tree.nodes[0].text, hits, self.config.doc_chars)
        completion = await self.judge("r3_relevance_judge", values, f"{node.path}/r")
        score = parse_relevance(completion.text)
        error = None if score is not None else "no readable 'So the relevance is' verdict"
        return Verdict(score or 0.0, completion.call_id or None, error)

    async def judge(self, prompt: str, values: dict[str, str], path: str) -> Completion:
        request = judge_request(prompt, values, self.config.judge_max_tokens, self.seed(path), self.tags(path))
        return (await self.sample(request))[0]


def _keep(attempts: list[Attempt]) -> Attempt | None:
    """Best-of-N: the correct attempt with the fewest steps, the earliest on a tie."""
    correct = [a for a in attempts if a.outcome == "correct"]
    return min(correct, key=lambda a: (len(a.nodes), a.index)) if correct else None


def _reason(attempt: Attempt, kept: Attempt | None) -> str:
    if attempt is kept:
        return "kept"
    if attempt.outcome != "correct":
        return attempt.outcome
    if kept is not None and len(attempt.nodes) == len(kept.nodes):
        return "as short as the kept trajectory, an earlier attempt"
    return "longer than the kept trajectory"


def _reward(node: Node, name: str, value: float, scale: float | None = None, verdict: Verdict | None = None) -> dict:
    return {
        "reward_id": stable_id("r3-reward", node.node_id, name),
        "run_id": node.run_id,
        "question_id": node.question_id,
        "strategy": node.strategy,
        "node_id": node.node_id,
        "name": name,
        "value": value,
        "scale": scale,
        "scaled": None if scale is None else value * scale,
        "is_format_error": bool(verdict and verdict.error),
        "error": verdict.error if verdict else None,
        "llm_call_id": verdict.call_id if verdict else None,
    }


async def _rewards(attempt: Attempt, config: R3Config, kept: Attempt | None) -> list[dict]:
    """The ``rewards`` rows of one attempt's steps (module docstring, 4); marks its nodes."""
    scale, rows = config.scale(attempt.outcome), []
    for node in attempt.nodes:
        node.parsed.update(outcome=attempt.outcome, scale=scale, kept=attempt is kept, reason=_reason(attempt, kept))
        node.is_selected = attempt is kept
        relevance = await attempt.relevance[node.node_id] if node.node_id in attempt.relevance else None
        fmt = config.format_penalty if node.is_format_error else 0.0
        if relevance is not None:
            rows.append(_reward(node, "relevance", relevance.value, verdict=relevance))
        rows.append(_reward(node, "format", fmt))
        rows.append(_reward(node, "process", (relevance.value if relevance else 0.0) + fmt, scale))
    last = attempt.nodes[-1]
    last.is_leaf = True
    last.reward = attempt.verdict.value if attempt.verdict else 0.0
    if attempt.verdict is not None:
        rows.append(_reward(last, "outcome", attempt.verdict.value, verdict=attempt.verdict))
    return rows


async def r3_question(question: Mapping, context: ShardContext, config: R3Config) -> tuple[QuestionTree, list[dict]]:
    """One question's attempts as a tree, and its ``rewards`` rows."""
    question_id, text, golden = question_fields(question)
    tree = QuestionTree(context.run_id, question_id, STRATEGY)
    root = tree.add_root(text, parsed={"golden_answers": golden, "doc_chars": config.doc_chars})
    run = _Attempts(tree, golden, context.generator, context.retriever, context.run_seed, config=config)
    attempts = await asyncio.gather(*(run.attempt(i) for i in range(config.n_attempts)))
    kept = _keep(list(attempts))
    root.is_selected = kept is not None
    root.parsed["kept_attempt"] = kept.index if kept else None
    rewards = [row for attempt in attempts for row in await _rewards(attempt, config, kept)]
    return tree, rewards


async def expand(question: Mapping, context: ShardContext, config: R3Config) -> TableRows:
    """The ``Strategy.expand`` of ``r3``."""
    tree, rewards = await r3_question(question, context, config)
    rows = tree.table_rows()
    rows.rewards = rewards
    return rows


async def retrieve_unseen(retriever: Retriever, query: str, top_k: int, seen: set[str]) -> list[Hit]:
    """The top-k passages of ``query`` that the trajectory has not retrieved yet (added to ``seen``)."""
    hits = await retrieve(retriever, query, top_k + len(seen))
    fresh = [hit for hit in hits if hit.passage_id not in seen][:top_k]
    seen.update(hit.passage_id for hit in fresh)
    return fresh
