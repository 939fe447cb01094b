"""DecEx-RAG's training data (§2.3): SFT examples from the best chains and DPO preference pairs
from sibling branches, declared with the columns they read (``EXPORTS``).

From each question's best root-to-leaf chain, one example per retrieval step: the input is the
question and the steps up to that retrieval's documents, {Q, (q_1, r_1), …, (q_x, e_x, d_x)};
the output is the steps after it up to and including the next sub-query, or the final answer.
The input is the rollout prompt (Table 8) with those steps as its history, the output the same
step rendering (``history.py``), so the model learns to write what the prompts read. Rows
are TRL conversational ``messages`` (a user turn, an assistant turn) for ``sft_examples``.

The best chain follows kept (``is_selected``) nodes from the root to a kept ``answer``; a chain
whose answer scores below ``min_reward`` (by default: scores nothing) is not exported. Under
``no_pruning`` several chains qualify; the highest-valued answer wins, and a tie goes to the
chain with the most retrievals, the "Most Retrieval Cost" selection that trained the best model
in the paper's ablation (Figure 2a).

Every branch is generated before pruning, so each expanded layer holds preference data. Under
a state the termination decision's branches are the final answers and the sub-questions; under
a kept sub-question the retrieval decision's branches are the self-answers and the sub-queries.
Each kept branch is paired against each pruned sibling of the same decision: an ``execution``
pair when both are the same kind (two sub-queries), a ``decision`` pair when they differ
(retrieve against answer from memory, continue against stop). Under ``no_pruning`` both
options of a decision are kept, and their best branches make a ``decision`` pair too.

Eq. 2 conditions on the question x and the previous steps y_<t: the prompt is the rollout prompt
(Table 8) with the state's steps as history, and chosen / rejected are the next step in the
rendering SFT trains on (``history.py``). Only valued branches pair (format errors and
duplicates carry no value); the kept branch must beat its sibling by ``min_gap``, and pairs
whose two texts are identical are dropped. Rows are TRL conversational
``prompt`` / ``chosen`` / ``rejected`` for ``preference_pairs``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any

from ragfactory.tasks.export.dpo import DpoConfig
from ragfactory.tasks.export.registry import Exporter, ExportInputs, Rows, StrategyExports, tree_columns
from ragfactory.tasks.export.sft import SftConfig, question_text, question_texts
from ragfactory.tasks.export.skips import skipped
from ragfactory.tasks.search.decex.config import STRATEGY
from ragfactory.tasks.search.decex.history import (
    Step,
    close_step,
    render_final,
    render_step,
    rollout_prompt,
    steps_from_chain,
)
from ragfactory.tasks.search.tree import RowTree, group_trees, path_key, stable_id

STATE_KINDS = ("question", "self_answer", "sub_query")


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
            skipped(
                tree,
                "sft_examples",
                "no kept chain ends in a valued answer"
                if chain is None
                else f"best kept chain's value {chain[-1]['value']:.3g} is below min_reward {config.min_reward:g}",
            )
            continue
        question = question_text(texts, tree)
        for node_ids, messages in chain_examples(question, chain):
            rows.append(
                {
                    "example_id": stable_id("sft", tree.run_id, tree.question_id, tree.strategy, node_ids[-1]),
                    "run_id": tree.run_id,
                    "question_id": tree.question_id,
                    "strategy": tree.strategy,
                    "messages": messages,
                    "node_ids": node_ids,
                }
            )
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


DECISIONS = {
    "answer": "termination",
    "sub_question": "termination",
    "self_answer": "retrieval",
    "sub_query": "retrieval",
}


_FLOAT_SLACK = 1e-9  # value differences are float means; 0.76 - 0.75 must clear a 0.01 gap


def preference_pairs(
    nodes_rows: Iterable[Mapping[str, Any]],
    questions: Iterable[Mapping[str, Any]],
    config: DpoConfig = DpoConfig(),
) -> list[dict[str, Any]]:
    """``preference_pairs`` rows for every question tree in ``nodes_rows``."""
    texts = question_texts(questions)
    rows: list[dict[str, Any]] = []
    for tree in group_trees(nodes_rows).values():
        question = question_text(texts, tree)
        before, candidates = len(rows), 0
        for parent in sorted(tree.rows.values(), key=lambda r: path_key(r["path"])):
            for chosen, rejected in sibling_pairs(tree.children(parent["node_id"])):
                candidates += 1
                row = _pair_row(tree, question, parent, chosen, rejected, config)
                if row is not None:
                    rows.append(row)
        if len(rows) == before:
            skipped(
                tree,
                "preference_pairs",
                "no valued kept branch has a sibling to pair with"
                if not candidates
                else f"no sibling pair of the allowed labels has a value gap of at least {config.min_gap:g}",
            )
    return rows


def sibling_pairs(children: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    """(kept, other) pairs among the valued decision branches under one parent."""
    branches = [c for c in children if c["kind"] in DECISIONS and c.get("value") is not None]
    kept = [c for c in branches if c["is_selected"]]
    pairs = [(k, o) for k in kept for o in branches if not o["is_selected"]]
    for a, b in combinations(kept, 2):  # no_pruning keeps one branch per option
        if a["kind"] != b["kind"]:
            pairs.append((a, b) if a["value"] >= b["value"] else (b, a))
    return pairs


def _pair_row(
    tree: RowTree, question: str, parent: dict, chosen: dict, rejected: dict, config: DpoConfig
) -> dict[str, Any] | None:
    label = "execution" if chosen["kind"] == rejected["kind"] else "decision"
    gap = chosen["value"] - rejected["value"]
    if label not in config.labels or gap < config.min_gap - _FLOAT_SLACK:
        return None
    steps, index = _state_steps(tree, parent)
    chosen_text = branch_text(chosen, parent, index)
    rejected_text = branch_text(rejected, parent, index)
    if chosen_text.strip() == rejected_text.strip():
        return None
    return {
        "pair_id": stable_id(
            "dpo", tree.run_id, tree.question_id, tree.strategy, chosen["node_id"], rejected["node_id"]
        ),
        "run_id": tree.run_id,
        "question_id": tree.question_id,
        "strategy": tree.strategy,
        "decision": label,
        "prompt": [{"role": "user", "content": rollout_prompt(question, steps)}],
        "chosen": [{"role": "assistant", "content": chosen_text}],
        "rejected": [{"role": "assistant", "content": rejected_text}],
        "chosen_value": float(chosen["value"]),
        "rejected_value": float(rejected["value"]),
        "gap": float(gap),
        "chosen_node_id": chosen["node_id"],
        "rejected_node_id": rejected["node_id"],
    }


def _state_steps(tree: RowTree, parent: dict) -> tuple[list[Step], int]:
    """The steps of the state a decision is taken in, and the 1-based index of the next step.

    A termination decision hangs under its state; a retrieval decision under the sub-question,
    whose own parent is the state.
    """
    state = parent if parent["kind"] in STATE_KINDS else tree.rows[parent["parent_id"]]
    steps = steps_from_chain([(n["kind"], n["parsed"]) for n in tree.chain(state["node_id"])])
    return steps, len(steps) + 1


def branch_text(branch: dict, parent: dict, index: int) -> str:
    """The next step as the branch would write it (the SFT rendering), from its parsed fields."""
    parsed = branch["parsed"]
    if branch["kind"] == "answer":
        return render_final(parsed.get("reasoning"), parsed["answer"])
    if branch["kind"] == "sub_question":
        return render_step(index, Step(parsed.get("reasoning") or "", parsed["question"]))
    sub_question = parent["parsed"]
    step = Step(sub_question.get("reasoning") or "", sub_question["question"])
    return render_step(index, close_step(step, branch["kind"], parsed), with_documents=False)


def _sft(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return sft_examples(inputs["nodes"], inputs["questions"], config.sft)


def _dpo(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return preference_pairs(inputs["nodes"], inputs["questions"], config.dpo)


_READS = {"nodes": tree_columns("parsed", "value", "is_selected"), "questions": ("question_id", "question")}
EXPORTS = StrategyExports(
    STRATEGY,
    (
        Exporter("sft_examples", _READS, _sft),
        Exporter("preference_pairs", _READS, _dpo),
    ),
)
