"""APEX-Searcher exports: executor SFT examples and planner GRPO prompts (§2.2-2.3), with the
columns each reads (``EXPORTS``) and the ``export.apex`` settings (``EXPORT_CONFIG``).

Executor (§2.3, "SFT-based Agentic Execution"): the paper fine-tunes the Execution Agent on
multi-round trajectories "filtered for answer correctness". Every execution chain (``nodes`` of
strategy "apex") whose final answer scores at least ``min_score`` on ``metric`` yields one
example per model call in it (sufficiency check, answer from knowledge, continuation decision,
first and later queries, sub-answer, synthesis): the prompt that call answered, replayed from
the chain (``execute.replay``), and the model's output with the closing tag its stop string
cut restored. Calls that were format errors are left out (they would teach the malformed form).
Rows are TRL conversational ``messages`` for ``sft_examples``; an example's node ids run from the
root to the call's node, whose ``parsed.call`` names the call type.

Planner (§2.2, GRPO with SEPR): one ``grpo_prompts`` row per question with a gold plan, task
"plan": the planner prompt as the conversational ``prompt``, the gold plan as JSON (its steps'
``step``, ``question``, the rewrite SEPR scores against, and ``original``) in ``gold_plan``, which
``sepr_reward`` reads, and the sampled plans' ids (= their plan node ids) as lineage. A question
whose sampled plans already average a SEPR F1 above ``max_mean_f1`` can be left out: GRPO's
group-relative advantage is zero where every sample scores the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.export.registry import Exporter, ExportInputs, Rows, StrategyExports, tree_columns
from ragfactory.tasks.export.sft import question_text, question_texts
from ragfactory.tasks.rewards.answer import METRICS
from ragfactory.tasks.search.apex.config import STRATEGY
from ragfactory.tasks.search.apex.execute import CALLS, replay
from ragfactory.tasks.search.apex.plan_format import MAX_STEPS, planner_prompt
from ragfactory.tasks.search.tree import RowTree, group_trees, path_key, stable_id

EXECUTOR_CALLS = tuple(CALLS)
PLAN_TASK = "plan"


@dataclass(frozen=True)
class ApexExportConfig:
    """Which runs and questions the APEX exports keep."""

    metric: str = "em"  # C.1: EM, the paper's primary metric, decides a correct run
    min_score: float = 1.0  # §2.3 keeps correct trajectories only
    calls: tuple[str, ...] = EXECUTOR_CALLS  # every call type the Execution Agent makes
    max_steps: int = MAX_STEPS  # the planner prompt's step bound; match ApexConfig.max_steps
    max_mean_f1: float = 1.0  # 1.0 keeps every question; lower drops ones the planner has solved

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"ApexExportConfig.metric must be one of {sorted(METRICS)}, got {self.metric!r}")
        unknown = set(self.calls) - set(CALLS)
        if unknown:
            raise ValueError(f"ApexExportConfig.calls may hold {sorted(CALLS)}, got unknown {sorted(unknown)}")


def executor_sft_examples(
    nodes_rows: Iterable[Mapping[str, Any]],
    questions: Iterable[Mapping[str, Any]],
    config: ApexExportConfig = ApexExportConfig(),
) -> list[dict[str, Any]]:
    """``sft_examples`` rows from the correct APEX execution chains in ``nodes_rows``."""
    texts = question_texts(questions)
    rows: list[dict[str, Any]] = []
    for tree in group_trees(nodes_rows).values():
        if tree.strategy != STRATEGY:
            continue
        question = question_text(texts, tree)
        for answer in _correct_answers(tree, config):
            chain = tree.chain(answer["node_id"])
            ids = [node["node_id"] for node in chain]
            for node, prompt in replay(question, chain):
                call = node["parsed"]["call"]
                if node["is_format_error"] or call not in config.calls:
                    continue
                rows.append(
                    {
                        "example_id": stable_id("sft", tree.run_id, tree.question_id, STRATEGY, node["node_id"]),
                        "run_id": tree.run_id,
                        "question_id": tree.question_id,
                        "strategy": STRATEGY,
                        "messages": [
                            {"role": "user", "content": prompt},
                            {"role": "assistant", "content": closed_output(call, node["text"])},
                        ],
                        "node_ids": ids[: ids.index(node["node_id"]) + 1],
                    }
                )
    return rows


def _correct_answers(tree: RowTree, config: ApexExportConfig) -> list[dict[str, Any]]:
    answers = [
        row
        for row in tree.rows.values()
        if row["kind"] == "answer"
        and row["parsed"].get("call") == "synthesis"
        and (row["parsed"].get(config.metric) or 0.0) >= config.min_score
    ]
    return sorted(answers, key=lambda row: path_key(row["path"]))


def closed_output(call: str, text: str) -> str:
    """The output with its closing tag restored when a stop string cut it.

    >>> closed_output("synthesis", "So: <answer> Leah Adler")
    'So: <answer> Leah Adler</answer>'
    """
    closing = CALLS[call][1]
    body = (text or "").rstrip()
    opening = closing.replace("</", "<")
    if opening in body and not body.endswith(closing):
        return body + closing
    return body


def planner_grpo_prompts(
    plans: Iterable[Mapping[str, Any]],
    plan_scores: Iterable[Mapping[str, Any]],
    questions: Iterable[Mapping[str, Any]],
    config: ApexExportConfig = ApexExportConfig(),
) -> list[dict[str, Any]]:
    """``grpo_prompts`` rows (task "plan") for every (run, question) with a gold plan."""
    questions = list(questions)
    texts = question_texts(questions)
    golden = {str(q["question_id"]): list(q.get("golden_answers") or []) for q in questions}
    f1 = {row["plan_id"]: row["f1"] for row in plan_scores}
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in plans:
        groups.setdefault((row["run_id"], row["question_id"]), []).append(row)
    rows = []
    for (run_id, question_id), group in sorted(groups.items()):
        gold = next((p for p in group if p["source"] == "gold"), None)
        sampled = sorted((p for p in group if p["source"] != "gold"), key=lambda p: p["plan_id"])
        scores = [f1[p["plan_id"]] for p in sampled if p["plan_id"] in f1]
        if gold is None or (scores and sum(scores) / len(scores) > config.max_mean_f1):
            continue
        if question_id not in texts:
            raise ValueError(f"question {question_id!r} of run {run_id!r} is not in the questions given")
        rows.append(
            {
                "prompt_id": stable_id("grpo", run_id, question_id, STRATEGY, PLAN_TASK),
                "run_id": run_id,
                "question_id": question_id,
                "strategy": STRATEGY,
                "task": PLAN_TASK,
                "prompt": [{"role": "user", "content": planner_prompt(texts[question_id], config.max_steps)}],
                "golden_answers": golden[question_id],
                "gold_plan": gold_plan_json(gold["steps"]),
                "node_ids": [p["plan_id"] for p in sampled],
            }
        )
    return rows


def gold_plan_json(steps: Iterable[Mapping[str, Any]]) -> str:
    """The ``grpo_prompts.gold_plan`` text of a gold ``plans.steps`` list."""
    return json.dumps(
        [{"step": s["step"], "question": s["question"], "original": s["original"]} for s in steps],
        ensure_ascii=False,
    )


def _executor_sft(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return executor_sft_examples(inputs["nodes"], inputs["questions"], config.apex)


def _planner_grpo(inputs: ExportInputs, config: Any, run_seed: int) -> Rows:
    return planner_grpo_prompts(inputs["plans"], inputs["plan_scores"], inputs["questions"], config.apex)


EXPORT_CONFIG = {"apex": ("Executor SFT and planner GRPO rows (APEX)", ApexExportConfig)}
EXPORTS = StrategyExports(
    STRATEGY,
    (
        Exporter(
            "sft_examples",
            {"nodes": tree_columns("text", "parsed", "is_format_error"), "questions": ("question_id", "question")},
            _executor_sft,
        ),
        Exporter(
            "grpo_prompts",
            {
                "plans": ("run_id", "question_id", "plan_id", "source", "steps"),
                "plan_scores": ("plan_id", "f1"),
                "questions": ("question_id", "question", "golden_answers"),
            },
            _planner_grpo,
        ),
    ),
)
