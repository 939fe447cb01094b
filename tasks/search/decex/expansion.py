"""DecEx-RAG search-tree expansion with pruning (§2.1–2.2; "No Pruning Search", §4.1).

One question's tree, layer by layer from the state s_t = [Q, (q_1, r_1), …, (q_t, r_t)]:

1. Termination decision: the termination prompt (Table 4) is sampled ``termination_samples``
   times at a non-zero temperature; the iteration ends when more than half the samples give an
   ``<answer>``. Every distinct answer among those samples becomes an ``answer`` node, scored
   against the golden answers (a final answer is its own outcome, so it needs no rollout).
2. Otherwise ``k`` sub-questions (Table 5), deduplicated by normalised text, each valued by
   ``n_rollouts`` rollouts (Table 8) as the mean score of their final answers (Eq. 1); the best
   is kept.
3. Retrieval decision for the kept sub-question: ``k`` self-answers (Table 6), deduplicated and
   valued the same way; when the best value reaches ``threshold`` retrieval is skipped and that
   answer is kept. Otherwise ``k`` sub-queries (Table 7), each retrieving ``top_k`` documents,
   are valued and the best is kept: the next state.
4. The tree stops on termination or after ``t_max`` iterations, where the termination prompt is
   sampled once more and its best answer closes the tree. When none of those samples answers
   (or no sub-question is left to follow), the termination prompt is sampled once more held to
   ``<answer>`` by its grammar (a ``final`` vote), so every tree closes with an answer node and
   a best chain exists (§2.2: expansion runs until the limit *or* termination).

Every request carries its prompt's output grammar (``prompts/decex_*.lark`` in this folder); with
structured generation on (``llm.<role>.structured``) the engine holds each sample to it.

``no_pruning`` is the paper's comparison ("retains the optimal execution branches for the two
decisions"): neither decision prunes an option. At every state the best final answer and the
best sub-question are both kept, and under that sub-question the best self-answer and the best
sub-query both become states, so states double with depth (the 2^l of §4.1).

Every generated text is a node, kept (``is_selected``) or pruned; malformed outputs are nodes
with ``format_error`` and no value, and duplicates point at the node they repeat
(``parsed.duplicate_of``). Each rollout is a ``rollout_leaf`` node under the branch it values and
a ``rollouts`` row whose ``rollout_id`` is that leaf's id (``valuation.py``). Sibling requests
go out together (``asyncio.gather``), and several samples of one prompt are one request with
``n``, so the batcher merges the rollouts of all branches and questions of a shard into large
engine calls.

The parameters, with the paper's defaults, are ``DecExConfig`` in ``config.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ragfactory.tasks.llm.types import Completion, Generator, Grammar, Message, Request, Sampling
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.rewards.answer import normalize_answer
from ragfactory.tasks.search.common import Expansion, hit_record, question_fields, search_batch
from ragfactory.tasks.search.decex import history
from ragfactory.tasks.search.decex.config import TERMINATION, DecExConfig, grammar
from ragfactory.tasks.search.decex.history import Step, close_step
from ragfactory.tasks.search.decex.steps import (
    parse_self_answer,
    parse_sub_query,
    parse_sub_question,
    parse_termination,
)
from ragfactory.tasks.search.decex.valuation import value_branches
from ragfactory.tasks.search.parsing import Parsed
from ragfactory.tasks.search.tree import Node, QuestionTree

# kind: (path segment prefix, parser, the parsed field that names a duplicate, prompt)
_BRANCH_KINDS: dict[str, tuple[str, Callable[[str], Parsed], str, str]] = {
    "sub_question": ("s", parse_sub_question, "question", "decex_sub_question"),
    "self_answer": ("w", parse_self_answer, "answer", "decex_self_answer"),
    "sub_query": ("e", parse_sub_query, "query", "decex_sub_query"),
}

# The closing tag that completes each decision's output (Tables 4-6); a sub-query (Table 7) is
# plain text, so it runs to the end of the sample.
TERMINATION_STOP = ("</answer>", "</question>")
_BRANCH_STOPS = {"sub_question": ("</question>",), "self_answer": ("</answer>",)}


@dataclass(frozen=True)
class State:
    """A state s_t: the node its next layer hangs under and the steps that led there."""

    node: Node
    steps: tuple[Step, ...]
    layer: int


@dataclass
class _Expansion(Expansion):
    """One question's DecEx expansion: the shared one plus the question text and the config
    (the configured ``metric`` of ``scores`` is an answer's reward)."""

    question: str = ""
    config: DecExConfig = DecExConfig()

    async def prompt(
        self,
        prompt: str,
        n: int,
        path: str,
        role: str,
        grammar: Grammar,
        stop: tuple[str, ...] = (),
    ) -> list[Completion]:
        """``n`` samples of one prompt as one request, seeded by the path of what it expands.

        ``grammar`` is the prompt's output grammar; ``stop`` ends a sample at the closing tag
        that completes it, so nothing after the decision costs tokens (the parsers read a tag
        left open by a stop string to its end).
        """
        cfg = self.config
        sampling = Sampling(
            n=n,
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            stop=stop,
            seed=self.seed(path),
            grammar=grammar,
        )
        return await self.sample(Request((Message("user", prompt),), sampling, role, self.tags(path)))


async def expand_question(
    question: Mapping,
    generator: Generator,
    retriever: Retriever,
    config: DecExConfig,
    run_id: str,
    run_seed: int,
) -> QuestionTree:
    """Expand one ``questions`` row into its DecEx-RAG tree (nodes and rollouts as table rows)."""
    question_id, text, golden = question_fields(question)
    tree = QuestionTree(run_id, question_id, config.strategy)
    root = tree.add_root(text, parsed={"golden_answers": golden})
    expansion = _Expansion(tree, golden, generator, retriever, run_seed, question=text, config=config)
    await _expand_state(expansion, State(root, (), 0))
    return tree


async def _expand_state(exp: _Expansion, state: State) -> None:
    cfg = exp.config
    final = state.layer >= cfg.t_max
    if cfg.no_pruning and not final:
        (answers, _), sub_questions = await asyncio.gather(
            _decide_termination(exp, state), _expand_sub_questions(exp, state)
        )
    else:
        answers, terminate = await _decide_termination(exp, state)
        if final or terminate:
            await _close(exp, state, answers)
            return
        sub_questions = await _expand_sub_questions(exp, state)
    sub_question = _keep(_best(sub_questions))
    if sub_question is None:  # no sub-question to follow: answer instead
        await _close(exp, state, answers)
        return
    if cfg.no_pruning:
        _keep(_best(answers))
    children = await _expand_retrieval(exp, state, sub_question)
    await asyncio.gather(*(_expand_state(exp, child) for child in children))


async def _decide_termination(exp: _Expansion, state: State) -> tuple[list[Node], bool]:
    """The termination votes as nodes, the answer nodes they propose, and the majority's call.

    Before ``min_iterations`` states there is no vote: the iteration goes on.
    """
    cfg, parent = exp.config, state.node
    if state.layer < min(cfg.min_iterations, cfg.t_max):
        return [], False
    prompt = history.termination_prompt(exp.question, state.steps)
    completions = await exp.prompt(
        prompt,
        cfg.termination_samples,
        f"{parent.path}/t",
        cfg.role,
        grammar(TERMINATION, cfg.max_tokens),
        TERMINATION_STOP,
    )
    votes = [
        _add_generated(exp, parent, f"t{i}", "termination", c, parse_termination(c.text), state.layer)
        for i, c in enumerate(completions)
    ]
    terminate = 2 * sum(v.parsed["decision"] == "terminate" for v in votes) > len(votes)
    for vote in votes:
        vote.is_selected = vote.parsed["decision"] == ("terminate" if terminate else "continue")
    return _answer_nodes(exp, state, votes), terminate


async def _close(exp: _Expansion, state: State, answers: list[Node]) -> None:
    """Keep the best answer; with none, sample the termination prompt held to ``<answer>``."""
    if not answers:
        cfg, parent = exp.config, state.node
        prompt = history.termination_prompt(exp.question, state.steps)
        [completion] = await exp.prompt(
            prompt,
            1,
            f"{parent.path}/f",
            cfg.role,
            grammar(TERMINATION, cfg.max_tokens, outcome="answer"),
            TERMINATION_STOP,
        )
        vote = _add_generated(
            exp, parent, "f0", "termination", completion, parse_termination(completion.text), state.layer
        )
        vote.parsed["final"] = True
        vote.is_selected = vote.parsed["decision"] == "terminate"
        answers = _answer_nodes(exp, state, [vote])
    _keep(_best(answers))


def _answer_nodes(exp: _Expansion, state: State, votes: list[Node]) -> list[Node]:
    """One ``answer`` node per distinct (normalised) answer the terminating votes gave."""
    groups: dict[str, list[Node]] = {}
    for vote in votes:
        if vote.parsed["decision"] == "terminate":
            groups.setdefault(normalize_answer(vote.parsed["answer"]), []).append(vote)
    nodes = []
    for j, group in enumerate(groups.values()):
        first = group[0]
        scores = exp.scores(first.parsed["answer"])
        parsed = {
            "layer": state.layer,
            "reasoning": first.parsed.get("reasoning"),
            "answer": first.parsed["answer"],
            "votes": len(group),
            "termination_node_ids": [v.node_id for v in group],
            **scores,
        }
        reward = scores[exp.config.metric]
        nodes.append(
            exp.tree.add_child(
                state.node,
                f"a{j}",
                "answer",
                first.text,
                parsed=parsed,
                llm_call_id=first.llm_call_id,
                is_leaf=True,
                reward=reward,
                visits=1,
                value=reward,
            )
        )
    return nodes


async def _expand_sub_questions(exp: _Expansion, state: State) -> list[Node]:
    prompt = history.sub_question_prompt(exp.question, state.steps)
    nodes = await _branches(exp, state.node, "sub_question", prompt, exp.config.role, state.layer)
    branches = [(n, state.steps + (_open_step(n),)) for n in nodes if _is_valid(n)]
    await value_branches(exp, exp.question, exp.config, branches)
    return nodes


async def _expand_retrieval(exp: _Expansion, state: State, sub_question: Node) -> list[State]:
    """The retrieval decision under the kept sub-question; the states it keeps."""
    cfg = exp.config
    if cfg.no_pruning:
        answers, queries = await asyncio.gather(
            _expand_self_answers(exp, state, sub_question), _expand_sub_queries(exp, state, sub_question)
        )
        kept = [n for n in (_keep(_best(answers)), _keep(_best(queries))) if n is not None]
        sub_question.parsed["retrieval_decision"] = "both"
    else:
        answers = await _expand_self_answers(exp, state, sub_question)
        best = _best(answers)
        skip = best is not None and best.value >= cfg.threshold
        sub_question.parsed["retrieval_decision"] = "skip" if skip else "retrieve"
        if not skip:
            queries = await _expand_sub_queries(exp, state, sub_question)
            best = _best(queries) or best  # every sub-query malformed: the self-answer carries on
        kept = [_keep(best)] if best is not None else []
    step = _open_step(sub_question)
    return [State(n, state.steps + (close_step(step, n.kind, n.parsed),), state.layer + 1) for n in kept]


async def _expand_self_answers(exp: _Expansion, state: State, sub_question: Node) -> list[Node]:
    prompt = history.self_answer_prompt(sub_question.parsed["question"])
    role = exp.config.retrieval_role
    nodes = await _branches(exp, sub_question, "self_answer", prompt, role, state.layer)
    await value_branches(exp, exp.question, exp.config, _answered(state, sub_question, nodes))
    return nodes


async def _expand_sub_queries(exp: _Expansion, state: State, sub_question: Node) -> list[Node]:
    prompt = history.sub_query_prompt(sub_question.parsed["question"])
    role = exp.config.retrieval_role
    nodes = await _branches(exp, sub_question, "sub_query", prompt, role, state.layer)
    valid = [n for n in nodes if _is_valid(n)]
    found = await search_batch(exp.retriever, [n.parsed["query"] for n in valid], exp.config.top_k)
    for node, hits in zip(valid, found):
        node.passage_ids = [hit.passage_id for hit in hits]
        node.parsed["hits"] = [hit_record(hit) for hit in hits]
    await value_branches(exp, exp.question, exp.config, _answered(state, sub_question, nodes))
    return nodes


def _answered(state: State, sub_question: Node, nodes: list[Node]) -> list[tuple[Node, tuple[Step, ...]]]:
    """Each valid branch with the state it leads to: the sub-question's step closed by it."""
    step = _open_step(sub_question)
    return [(n, state.steps + (close_step(step, n.kind, n.parsed),)) for n in nodes if _is_valid(n)]


def _open_step(sub_question: Node) -> Step:
    return Step(sub_question.parsed.get("reasoning") or "", sub_question.parsed["question"])


def _add_generated(
    exp: _Expansion,
    parent: Node,
    segment: str,
    kind: str,
    completion: Completion,
    parsed: Parsed,
    layer: int,
) -> Node:
    return exp.tree.add_child(
        parent,
        segment,
        kind,
        completion.text,
        parsed={"layer": layer, **parsed.fields},
        llm_call_id=completion.call_id or None,
        is_format_error=parsed.error is not None,
        format_error=parsed.error,
    )


async def _branches(exp: _Expansion, parent: Node, kind: str, prompt: str, role: str, layer: int) -> list[Node]:
    """``k`` samples of one prompt as nodes; a repeat of an earlier sample (its normalised
    text) is marked ``duplicate_of`` and not valued."""
    prefix, parse, key, prompt_name = _BRANCH_KINDS[kind]
    completions = await exp.prompt(
        prompt,
        exp.config.k,
        f"{parent.path}/{prefix}",
        role,
        grammar(prompt_name, exp.config.max_tokens),
        _BRANCH_STOPS.get(kind, ()),
    )
    nodes: list[Node] = []
    seen: dict[str, Node] = {}
    for i, completion in enumerate(completions):
        node = _add_generated(exp, parent, f"{prefix}{i}", kind, completion, parse(completion.text), layer)
        if not node.is_format_error:
            text = normalize_answer(node.parsed[key])
            if text in seen:
                node.parsed["duplicate_of"] = seen[text].node_id
            else:
                seen[text] = node
        nodes.append(node)
    return nodes


def _is_valid(node: Node) -> bool:
    return not node.is_format_error and "duplicate_of" not in node.parsed


def _best(nodes: Sequence[Node]) -> Node | None:
    """The highest-valued node; the first generated wins a tie."""
    valued = [n for n in nodes if n.value is not None]
    return max(valued, key=lambda n: n.value) if valued else None


def _keep(node: Node | None) -> Node | None:
    if node is not None:
        node.is_selected = True
    return node
