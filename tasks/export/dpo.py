"""DPO preference pairs from DecEx-RAG trees (§2.3 "Direct Preference Optimization"; A.2).

Every branch is generated before pruning, so each expanded layer holds preference data. Under
a state the termination decision's branches are the final answers and the sub-questions; under
a kept sub-question the retrieval decision's branches are the self-answers and the sub-queries.
Each kept branch is paired against each pruned sibling of the same decision: an ``execution``
pair when both are the same kind (two sub-queries), a ``decision`` pair when they differ
(retrieve against answer from memory, continue against stop). Under ``no_pruning`` both
options of a decision are kept, and their best branches make a ``decision`` pair too.

Eq. 2 conditions on the question x and the previous steps y_<t: the prompt is the rollout prompt
(Table 8) with the state's steps as history, and chosen / rejected are the next step in the
rendering SFT trains on (``decex.history``). Only valued branches pair (format errors and
duplicates carry no value); the kept branch must beat its sibling by ``min_gap``, and pairs
whose two texts are identical are dropped. Rows are TRL conversational
``prompt`` / ``chosen`` / ``rejected`` for ``preference_pairs``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from ragfactory.tasks.export.sft import STATE_KINDS, question_text, question_texts
from ragfactory.tasks.export.skips import skipped
from ragfactory.tasks.search.decex.history import (
    Step,
    close_step,
    render_final,
    render_step,
    rollout_prompt,
    steps_from_chain,
)
from ragfactory.tasks.search.tree import RowTree, group_trees, path_key, stable_id

DECISIONS = {
    "answer": "termination",
    "sub_question": "termination",
    "self_answer": "retrieval",
    "sub_query": "retrieval",
}
LABELS = ("decision", "execution")
_FLOAT_SLACK = 1e-9  # value differences are float means; 0.76 - 0.75 must clear a 0.01 gap


@dataclass(frozen=True)
class DpoConfig:
    """Which sibling pairs become preference data."""

    min_gap: float = 0.01  # a smaller value gap is rollout noise (ReasonRAG uses 0.01 too, §2.2.3)
    labels: tuple[str, ...] = LABELS  # Figure 2(b): dropping either kind of pair hurt

    def __post_init__(self):
        unknown = set(self.labels) - set(LABELS)
        if unknown:
            raise ValueError(f"DpoConfig.labels may hold {LABELS}, got unknown {sorted(unknown)}")
        if self.min_gap < 0:
            raise ValueError(f"DpoConfig.min_gap must be >= 0, got {self.min_gap}")


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
            skipped(tree, "preference_pairs", "no valued kept branch has a sibling to pair with" if not candidates
                    else f"no sibling pair of the allowed labels has a value gap of at least {config.min_gap:g}")
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
