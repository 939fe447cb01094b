"""TreePS-RAG online tree construction (§2.1–2.2 and Algorithm 1, Phase 1).

A node is one ReAct step (r_i, a_i, o_i): the model's reasoning and action, and for a search
the top-K passages it retrieved (``treeps.steps``). The tree grows layer by layer from the
question's prompt, generate-then-prune:

1. Every retained parent of depth d − 1, M(d − 1), samples B_d = ceil(N / |M(d − 1)|)
   children (Eq. 2) in one request with ``n = B_d``; all parents of the layer go out together,
   and the batcher merges them with the other questions' layers into one engine call.
2. An answer child is a leaf scored against the golden answers (EM by default, §2.3). A child
   with neither action is malformed: recorded with its ``format_error`` as a leaf that gave no
   answer (score 0, the outcome Search-R1 gives a trajectory without one), so the question
   goes on.
3. Every search child retrieves (one retriever call per question and layer); under each parent
   the search children are pruned to min(N_retain, |C_search|) by clustering their passage sets
   (``treeps.pruning``) or, for the ablation of Table 2, at random. The kept ones form M(d).
4. Search children kept at depth D are leaves too (Algorithm 1, line 24): they end without an
   answer and score 0.

Every generated child is a node: kept (``is_selected``) or pruned, and every leaf is also a
``rollouts`` row: the trajectory from the root to it, in Search-R1's single-sequence layout.
Values and advantages (§2.3) are not the search's business: the build's valuation stage fills
them in over the ``nodes`` table once the shard is written (``tasks/valuate.py``).

Every step request carries the prompt's output grammar (``treeps_step.lark``: ``<reason>``,
then ``<search>`` or ``<answer>``); with structured generation on, no child is malformed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ragfactory.tasks.llm.types import Completion, Generator, Message, Request, Sampling
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.search.common import Expansion, hit_record, question_fields, search_batch
from ragfactory.tasks.search.tree import Node, QuestionTree, Rollout
from ragfactory.tasks.search.treeps.config import STRATEGY, TreePSConfig
from ragfactory.tasks.search.treeps.pruning import (
    random_retain,
    similarity_retain,
)
from ragfactory.tasks.search.treeps.steps import (
    STEP_STOP,
    closed_step,
    initial_prompt,
    parse_step,
    render_response,
    step_turns,
)

_SEGMENTS = {"search": "s", "answer": "a", None: "f"}  # path prefix per action; f: malformed


@dataclass(frozen=True)
class Parent:
    """A node of M(d − 1) with the chat that reaches it (prompt, steps and observations)."""

    node: Node
    turns: tuple[Message, ...]


@dataclass
class _Expansion(Expansion):
    """One question's TreePS expansion: the shared one plus the config."""

    config: TreePSConfig = TreePSConfig()

    async def children(self, parent: Parent, n: int) -> list[Completion]:
        """``n`` continuations of the parent's state as one request (Eq. 1)."""
        cfg = self.config
        path = parent.node.path
        sampling = Sampling(
            n=n,
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            stop=STEP_STOP,
            seed=self.seed(f"{path}/c"),
            grammar=cfg.grammar,
        )
        return await self.sample(Request(parent.turns, sampling, cfg.role, self.tags(path)))


async def expand_question(
    question: Mapping,
    generator: Generator,
    retriever: Retriever,
    config: TreePSConfig,
    run_id: str,
    run_seed: int,
) -> QuestionTree:
    """Expand one ``questions`` row into its TreePS-RAG tree (nodes and rollouts as table rows)."""
    question_id, text, golden = question_fields(question)
    tree = QuestionTree(run_id, question_id, STRATEGY)
    root = tree.add_root(text, parsed={"golden_answers": golden, "prompt": config.prompt})
    exp = _Expansion(tree, golden, generator, retriever, run_seed, config=config)
    frontier = [Parent(root, (Message("user", initial_prompt(text, config.prompt)),))]
    for depth in range(1, config.depth + 1):
        if not frontier:
            break
        frontier = await _expand_layer(exp, frontier, depth)
    for parent in frontier:  # kept at depth D: forced leaves (Algorithm 1, line 24)
        _make_leaf(exp, parent.node, None, forced=True)
    tree.rollouts.extend(_rollouts(exp, root))
    return tree


async def _expand_layer(exp: _Expansion, frontier: list[Parent], depth: int) -> list[Parent]:
    """Generate B_d children under every parent, retrieve for the searches, prune: M(d)."""
    branching = exp.config.branching_at(depth, len(frontier))
    samples = await asyncio.gather(*(exp.children(parent, branching) for parent in frontier))
    children = [
        [_add_child(exp, parent, i, c, depth, branching) for i, c in enumerate(completions)]
        for parent, completions in zip(frontier, samples)
    ]
    searches = [node for nodes in children for node in nodes if node.parsed["action"] == "search"]
    found = await search_batch(exp.retriever, [n.parsed["query"] for n in searches], exp.config.top_k)
    for node, hits in zip(searches, found):
        node.passage_ids = [hit.passage_id for hit in hits]
        node.parsed["hits"] = [hit_record(hit) for hit in hits]
    kept: list[Parent] = []
    for parent, nodes in zip(frontier, children):
        for node in _prune(exp, parent.node, [n for n in nodes if n.parsed["action"] == "search"]):
            node.is_selected = True
            kept.append(Parent(node, parent.turns + tuple(step_turns(node.text, node.parsed["hits"]))))
    return kept


def _add_child(exp: _Expansion, parent: Parent, index: int, completion: Completion, depth: int, branching: int) -> Node:
    parsed = parse_step(completion.text, exp.config.prompt)
    action = parsed.get("action")
    node = exp.tree.add_child(
        parent.node,
        f"{_SEGMENTS[action]}{index}",
        "sub_query" if action == "search" else "answer",
        closed_step(completion.text, action),
        parsed={"depth": depth, "sample": index, "branching": branching, **parsed.fields},
        llm_call_id=completion.call_id or None,
        is_format_error=parsed.error is not None,
        format_error=parsed.error,
    )
    if action != "search":
        _make_leaf(exp, node, parsed.get("answer"))
    return node


def _make_leaf(exp: _Expansion, node: Node, answer: str | None, forced: bool = False) -> None:
    """A leaf scored by its answer; no answer (malformed, or cut at depth D) scores 0."""
    scores = exp.scores(answer)
    node.parsed.update(scores, **({"forced_leaf": True} if forced else {}))
    node.is_leaf = node.is_selected = True
    node.reward = scores[exp.config.metric]


def _prune(exp: _Expansion, parent: Node, searches: list[Node]) -> list[Node]:
    """The search children kept under ``parent`` (§2.2); each records its cluster."""
    cfg = exp.config
    if cfg.pruning == "random":
        rng = np.random.default_rng(exp.seed(f"{parent.path}/prune"))
        return [searches[i] for i in random_retain(len(searches), cfg.n_retain, rng)]
    keep, labels = similarity_retain([n.passage_ids for n in searches], cfg.n_retain, cfg.linkage)
    for node, label in zip(searches, labels):
        node.parsed["cluster"] = label
    return [searches[i] for i in keep]


def _rollouts(exp: _Expansion, root: Node) -> list[Rollout]:
    """One ``rollouts`` row per leaf: the trajectory from the root, as one response."""
    tree = exp.tree
    rows = []
    for leaf in (n for n in tree.nodes if n.is_leaf):
        chain = _chain(tree, leaf)
        turns = [turn for node in chain for turn in step_turns(node.text, node.parsed.get("hits"))]
        response, _, _ = render_response(turns)
        parent = tree.node(leaf.parent_id)
        seed = exp.seed(f"{parent.path}/c") + leaf.parsed["sample"]
        rows.append(
            Rollout(
                leaf.node_id,
                tree.run_id,
                tree.question_id,
                root.node_id,
                response,
                leaf.parsed.get("answer"),
                leaf.parsed["em"],
                leaf.parsed["f1"],
                len(chain),
                [n.llm_call_id or "" for n in chain],
                seed,
            )
        )
    return rows


def _chain(tree: QuestionTree, node: Node) -> list[Node]:
    """The steps from depth 1 down to ``node``."""
    chain = [node]
    while chain[-1].parent_id is not None and chain[-1].depth > 1:
        chain.append(tree.node(chain[-1].parent_id))
    return chain[::-1]
