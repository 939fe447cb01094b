"""SFT examples from DecEx-RAG trees (§2.3 "Supervised Fine-tuning").

From each question's best root-to-leaf chain, one example per retrieval step: the input is the
question and the steps up to that retrieval's documents, {Q, (q_1, r_1), …, (q_x, e_x, d_x)};
the output is the steps after it up to and including the next sub-query, or the final answer.
The input is the rollout prompt (Table 8) with those steps as its history, the output the same
step rendering (``decex.history``), so the model learns to write what the prompts read. Rows
are TRL conversational ``messages`` (a user turn, an assistant turn) for ``sft_examples``.

The best chain follows kept (``is_selected``) nodes from the root to a kept ``answer``; a chain
whose answer scores below ``min_reward`` (by default: scores nothing) is not exported. Under
``no_pruning`` several chains qualify; the highest-valued answer wins, and a tie goes to the
chain with the most retrievals, the "Most Retrieval Cost" selection that trained the best model
in the paper's ablation (Figure 2a).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.export.skips import skipped
from ragfactory.tasks.search.decex.history import (
    Step,
    render_final,
    render_step,
    rollout_prompt,
    steps_from_chain,
)
from ragfactory.tasks.search.tree import RowTree, group_trees, path_key, stable_id

STATE_KINDS = ("question", "self_answer", "sub_query")


@dataclass(frozen=True)
class SftConfig:
    """Which chain a question contributes."""

    prefer: str = "most_retrieval"  # tie-break between equal chains; Figure 2(a): "Most" trained best
    # A chain is exported when its final answer scores at least this. §2.3 takes every question's
    # best chain (0), but an answer that scores nothing teaches the wrong answer: 0.01 keeps any
    # partial credit (the least F1 of a short answer is ~0.1) and drops only zero-score chains.
    min_reward: float = 0.01

    def __post_init__(self):
        if self.prefer not in ("most_retrieval", "least_retrieval"):
            raise ValueError(
                f"SftConfig.prefer must be most_retrieval or least_retrieval, got {self.prefer!r}"
            )


def question_texts(questions: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """question_id -> question text from ``questions`` rows."""
    texts = {}
    for i, row in enumerate(questions):
        if row.get("question_id") is None or row.get("question") is None:
            raise ValueError(f"questions row {i} needs question_id and question, got {sorted(row)}")
        texts[str(row["question_id"])] = str(row["question"])
    return texts


def question_text(texts: Mapping[str, str], tree: RowTree) -> str:
    if tree.question_id not in texts:
        raise ValueError(
            f"question {tree.question_id!r} of run {tree.run_id!r} is not in the questions given"
        )
    return texts[tree.question_id]


def best_chain(tree: RowTree, config: SftConfig = SftConfig()) -> list[dict[str, Any]] | None:
    """The kept root-to-answer chain with the highest value, or None when no kept answer exists."""
    chains = []
    for row in sorted(tree.rows.values(), key=lambda r: path_key(r["path"])):
        if row["kind"] != "answer" or not row["is_selected"] or row.get("value") is None:
            continue
        chain = tree.chain(row["node_id"])
        if all(node["is_selected"] for node in chain[1:]):
            chains.append(chain)
    if not chains:
        return None
    sign = 1 if config.prefer == "most_retrieval" else -1

    def rank(chain):  # max() keeps the first of equals: the earliest path
        return chain[-1]["value"], sign * sum(node["kind"] == "sub_query" for node in chain)

    return max(chains, key=rank)


def sft_examples(
    nodes_rows: Iterable[Mapping[str, Any]],
    questions: Iterable[Mapping[str, Any]],
    config: SftConfig = SftConfig(),
) -> list[dict[str, Any]]:
    """``sft_examples`` rows for every question tree in ``nodes_rows``."""
    texts = question_texts(questions)
    rows: list[dict[str, Any]] = []
    for tree in group_trees(nodes_rows).values():
        chain = best_chain(tree, config)
        if chain is None or chain[-1]["value"] < config.min_reward:
            skipped(tree, "sft_examples", "no kept chain ends in a valued answer" if chain is None else
                    f"best kept chain's value {chain[-1]['value']:.3g} is below min_reward {config.min_reward:g}")
            continue
        question = question_text(texts, tree)
        for node_ids, messages in chain_examples(question, chain):
            rows.append({
                "example_id": stable_id("sft", tree.run_id, tree.question_id, tree.strategy, node_ids[-1]),
                "run_id": tree.run_id,
                "question_id": tree.question_id,
                "strategy": tree.strategy,
                "messages": messages,
                "node_ids": node_ids,
            })
    return rows


def chain_examples(question: str, chain: list[dict[str, Any]]) -> list[tuple[list[str], list[dict]]]:
    """(node ids, messages) per retrieval step of a root … answer chain.

    The chain alternates states and steps: root, (sub_question, self_answer | sub_query)*, answer;
    step j (0-based) is closed by chain node 2j + 2, so an example's lineage is a chain prefix.
    """
    _check_chain(chain)
    steps = steps_from_chain([(node["kind"], node["parsed"]) for node in chain])
    answer = chain[-1]["parsed"]
    retrievals = [j for j, step in enumerate(steps) if step.query is not None]
    examples, start = [], 0
    for end in retrievals + [len(steps)]:
        stop = min(end + 1, len(steps))
        output = [render_step(j + 1, steps[j], with_documents=False) for j in range(start, stop)]
        if end == len(steps):
            output.append(render_final(answer.get("reasoning"), answer["answer"]))
        last = 2 * end + 2 if end < len(steps) else len(chain) - 1
        node_ids = [n["node_id"] for n in chain[: last + 1]]
        examples.append((node_ids, _messages(question, steps[:start], output)))
        start = end + 1
    return examples


def _messages(question: str, history: list[Step], output: list[str]) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": rollout_prompt(question, history)},
        {"role": "assistant", "content": "\n\n".join(output)},
    ]


def _check_chain(chain: list[dict[str, Any]]) -> None:
    kinds = [node["kind"] for node in chain]
    ok = (
        len(kinds) % 2 == 0
        and kinds[0] == "question"
        and kinds[-1] == "answer"
        and all(kind == "sub_question" for kind in kinds[1:-1:2])
        and all(kind in ("self_answer", "sub_query") for kind in kinds[2:-1:2])
    )
    if not ok:
        node = chain[-1]
        raise ValueError(
            f"question {node['question_id']!r}: chain to {node['node_id']!r} is not a DecEx chain: {kinds}"
        )
