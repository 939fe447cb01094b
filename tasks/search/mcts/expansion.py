"""ReasonRAG MCTS expansion of one question (§2.2.2, Appendix A).

1. The root is the question in the Reasoning stage. Each iteration ``select``s a state by UCT
   (``uct.py``) and generates one step there: a Reasoning step (Fig. 12) ends in ``<query>``
   (the top-k passages are retrieved and the next state is Grounding) or ``<answer>`` (Terminal);
   a Grounding step (Fig. 13, with the documents) writes ``<evidence>`` and returns to Reasoning.
   A Reasoning step with no room left for a query, its evidence and an answer before
   ``max_depth`` is held to an answer by the ``reasonrag_final`` grammar; one on a path with
   fewer than ``min_queries`` queries is held to a query (``reasonrag_query``).
2. The new step is valued: an answer by its own ``metric`` (F1) against the gold answers, discounted
   α^depth (SPRE, Eq. 1 with its one deterministic outcome); any other step by SPRE over
   ``rollouts`` continuations to an answer (greedy first, then sampled), or by the Fig. 14 judge
   on the ``judge`` role (``value = "judge"``, Eq. 6). A malformed step is a format error on its
   node, a dead end valued 0.
3. The value is backed up to the root (Eq. 7). Up to ``parallel_selections`` selections of a
   round run concurrently (virtual loss); one is sequential MCTS.
4. After ``iterations`` steps (or when nothing is left to expand) every node gets its N
   (``visits``) and Q (``value``); nodes on a path to an answer are kept (``is_selected``),
   the others pruned (§2.2.3).

Seeds: a step is seeded by its node path (run, question, path), a rollout by the path and its
index, so a rerun replays from the call cache and a step's completion does not depend on what
else shares its batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from ragfactory.tasks.llm.types import Completion, Message, Request, Sampling
from ragfactory.tasks.prompts.loader import load_grammar, render_prompt
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.common import Expansion, hit_record, question_fields, retrieve
from ragfactory.tasks.search.mcts.config import STRATEGY, MctsConfig
from ragfactory.tasks.search.mcts.judge import parse_verdict
from ragfactory.tasks.search.mcts.pairs import answered
from ragfactory.tasks.search.mcts.steps import (
    GROUNDING,
    REASONING,
    STOP,
    closed,
    grounding_input,
    parse_turn,
    reasoning_input,
)
from ragfactory.tasks.search.mcts.uct import UctSearch, spre
from ragfactory.tasks.search.strategy import ShardContext
from ragfactory.tasks.search.tree import Node, QuestionTree, Rollout, TableRows, stable_id

KINDS = {"query": "sub_query", "answer": "answer", "evidence": "evidence"}
EXPECTED = {REASONING: ("query", "answer"), GROUNDING: ("evidence",)}


@dataclass(frozen=True)
class State:
    """A node and what the next step from it sees."""

    node: Node
    thoughts: tuple[str, ...]
    stage: str
    docs: tuple[Hit, ...] = ()
    queries: int = 0  # queries made on the way here


@dataclass(frozen=True)
class Step:
    """A generated step: its new state, value and whether it ends the trajectory."""

    state: State
    value: float
    terminal: bool


@dataclass
class _Search(Expansion):
    config: MctsConfig = MctsConfig()

    def forced(self, stage: str, depth: int) -> bool:
        """Whether a step at ``depth`` must answer: no room for a query, evidence and an answer."""
        return stage == REASONING and depth + 2 > self.config.max_depth

    async def generate(self, state: State, path: str, temperature: float, seed_path: str) -> Completion:
        """One step from ``state`` in its stage's prompt and grammar."""
        cfg, question = self.config, self.tree.nodes[0].text
        depth = state.node.depth + 1
        if state.stage == REASONING:
            system = render_prompt("reasonrag_reasoning", answer_format="answer")
            user = reasoning_input(question, state.thoughts)
            grammar = (
                "reasonrag_final"
                if self.forced(REASONING, depth)
                else "reasonrag_query"
                if state.queries < cfg.min_queries
                else "reasonrag_reasoning"
            )
        else:
            system, user = render_prompt("reasonrag_grounding"), grounding_input(question, state.thoughts, state.docs)
            grammar = "reasonrag_grounding"
        sampling = Sampling(
            temperature=temperature,
            max_tokens=cfg.max_tokens,
            stop=STOP,
            seed=self.seed(seed_path),
            grammar=load_grammar(grammar, cfg.max_tokens, "MctsConfig.max_tokens"),
        )
        request = Request((Message("system", system), Message("user", user)), sampling, cfg.role, self.tags(path))
        return (await self.sample(request))[0]

    async def step(self, parent: State, slot: int) -> Step:
        """Generate, record and value the child in ``slot`` of ``parent`` (module docstring)."""
        path = f"{parent.node.path}/s{slot}"
        completion = await self.generate(parent, path, self.config.temperature, path)
        turn = parse_turn(completion.text)
        action, content = turn.get("action"), turn.get("content")
        error = turn.error or (None if action in EXPECTED[parent.stage] else f"<{action}> in the {parent.stage} stage")
        kind = KINDS[action] if action and not error else ("sub_query" if parent.stage == REASONING else "evidence")
        text = closed(completion.text, action)
        node = self.tree.add_child(
            parent.node,
            f"s{slot}",
            kind,
            text,
            parsed={"stage": parent.stage, "action": action, "content": content, "slot": slot},
            llm_call_id=completion.call_id or None,
            is_format_error=error is not None,
            format_error=error,
        )
        thoughts = parent.thoughts + (text,)
        if error is not None:
            node.is_leaf, node.reward = True, 0.0
            return Step(State(node, thoughts, parent.stage), 0.0, True)
        if action == "answer":
            return Step(State(node, thoughts, REASONING), self.score_answer(node, content), True)
        docs: tuple[Hit, ...] = ()
        if action == "query":
            docs = tuple(await retrieve(self.retriever, content, self.config.top_k))
            node.passage_ids = [hit.passage_id for hit in docs]
            node.parsed["hits"] = [hit_record(hit) for hit in docs]
        state = State(
            node, thoughts, GROUNDING if action == "query" else REASONING, docs, parent.queries + (action == "query")
        )
        return Step(state, await self.simulate(state), False)

    def score_answer(self, node: Node, answer: str | None) -> float:
        """An answer's scores on its node; its value is SPRE of its own outcome (v · α^depth)."""
        scores = self.scores(answer)
        node.parsed.update(scores)
        node.is_leaf, node.reward = True, scores[self.config.metric]
        return spre([node.reward], [node.depth], self.config.alpha)

    async def simulate(self, state: State) -> float:
        """The value of a non-terminal step: SPRE over rollouts, or the judge's verdict."""
        if self.config.value == "judge":
            return await self.judge(state)
        outcomes = await asyncio.gather(*(self.rollout(state, i) for i in range(self.config.rollouts)))
        state.node.parsed["reached_answer"] = any(answered for _, _, answered in outcomes)
        return spre([v for v, _, _ in outcomes], [n for _, n, _ in outcomes], self.config.alpha)

    async def rollout(self, start: State, index: int) -> tuple[float, int, bool]:
        """(F1 of the answer reached, its depth, whether one was) continuing from ``start``;
        a ``rollouts`` row."""
        state, calls, depth, answer = start, [], start.node.depth, None
        temperature = 0.0 if index == 0 else self.config.temperature
        while depth < self.config.max_depth:
            depth += 1
            key = f"{start.node.path}/r{index}/{depth}"
            completion = await self.generate(_at_depth(state, depth - 1), key, temperature, key)
            calls.append(completion.call_id or "")
            turn = parse_turn(completion.text)
            action, content = turn.get("action"), turn.get("content")
            if turn.error or action not in EXPECTED[state.stage]:
                break
            thoughts = state.thoughts + (closed(completion.text, action),)
            if action == "answer":
                answer, state = content, State(state.node, thoughts, REASONING)
                break
            docs = tuple(await retrieve(self.retriever, content, self.config.top_k)) if action == "query" else ()
            state = State(
                state.node,
                thoughts,
                GROUNDING if action == "query" else REASONING,
                docs,
                state.queries + (action == "query"),
            )
        scores = self.scores(answer)
        value = scores[self.config.metric] if answer is not None else 0.0
        self.tree.rollouts.append(self._rollout_row(start, index, state, answer, scores, depth, calls))
        return value, depth, answer is not None

    def _rollout_row(
        self, start: State, index: int, end: State, answer: str | None, scores: dict, depth: int, calls: list[str]
    ) -> Rollout:
        """The ``rollouts`` row of rollout ``index`` from ``start``: its thoughts up to ``end``,
        the answer it reached (if any) and its scores, depth, calls and first seed."""
        return Rollout(
            stable_id("mcts-rollout", start.node.node_id, str(index)),
            self.tree.run_id,
            self.tree.question_id,
            start.node.node_id,
            " ".join(end.thoughts),
            answer,
            scores["em"],
            scores["f1"],
            depth,
            calls,
            self.seed(f"{start.node.path}/r{index}/{start.node.depth + 1}"),
        )

    async def judge(self, state: State) -> float:
        """Eq. 6: the Fig. 14 judge's verdict on the trajectory so far; malformed scores 0."""
        user = (
            f"Question: {self.tree.nodes[0].text}\nGolden Answers: {'; '.join(self.golden)}\n"
            f"Agent Thoughts: {' '.join(state.thoughts)}"
        )
        sampling = Sampling(temperature=0.0, max_tokens=self.config.max_tokens, seed=self.seed(f"{state.node.path}/j"))
        request = Request(
            (Message("system", render_prompt("reasonrag_process_judge")), Message("user", user)),
            sampling,
            "judge",
            self.tags(f"{state.node.path}/j"),
        )
        verdict = parse_verdict((await self.sample(request))[0].text)
        state.node.parsed["judge_score"] = verdict
        if verdict is None:
            state.node.parsed["judge_error"] = "no readable 'So the score is' verdict"
        return verdict or 0.0


def _at_depth(state: State, depth: int) -> State:
    """``state`` as seen from ``depth`` (a rollout's steps are not nodes; only the depth moves)."""
    node = state.node
    if node.depth == depth:
        return state
    shadow = Node(
        node.node_id, node.run_id, node.question_id, node.parent_id, node.path, depth, node.strategy, node.kind
    )
    return State(shadow, state.thoughts, state.stage, state.docs, state.queries)


async def search_question(question: Mapping, context: ShardContext, config: MctsConfig) -> QuestionTree:
    """One question's MCTS tree: steps as ``nodes`` with N and Q, rollouts as ``rollouts``."""
    question_id, text, golden = question_fields(question)
    tree = QuestionTree(context.run_id, question_id, STRATEGY)
    root = tree.add_root(text, parsed={"golden_answers": golden})
    search = _Search(tree, golden, context.generator, context.retriever, context.run_seed, config=config)
    uct, states = UctSearch(config.uct()), [State(root, (), REASONING)]
    done = 0
    while done < config.iterations:
        picks = []
        for _ in range(min(config.parallel_selections, config.iterations - done)):
            index = uct.select()
            if index is None:
                break
            picks.append((index, len(uct.nodes[index].children) + uct.nodes[index].expanding - 1))
        if not picks:
            break
        steps = await asyncio.gather(*(search.step(states[i], slot) for i, slot in picks))
        for (index, _), step in zip(picks, steps):
            uct.backpropagate(index, step.value, step.terminal)
            states.append(step.state)
        done += len(picks)
    _record_statistics(tree, uct, states)
    return tree


def _record_statistics(tree: QuestionTree, uct: UctSearch, states: list[State]) -> None:
    """N and Q on every node; kept (on a path to an answer) or pruned."""
    steps = [
        {
            "node_id": s.node.node_id,
            "parent_id": s.node.parent_id,
            "kind": s.node.kind,
            "reached_answer": s.node.parsed.get("reached_answer", False),
        }
        for s in states[1:]
        if not s.node.is_format_error
    ]
    keep = answered(steps)
    for index, state in enumerate(states):
        state.node.visits = uct.nodes[index].visits
        state.node.value = uct.q(index, virtual=False)
        state.node.is_selected = index == 0 or state.node.node_id in keep


async def expand(question: Mapping, context: ShardContext, config: MctsConfig) -> TableRows:
    """The ``Strategy.expand`` of ``mcts``."""
    return (await search_question(question, context, config)).table_rows()
