"""The APEX planner's plans in ``benchmarks/learning.py``: each trained model's plans scored by
SEPR (``tasks/rewards/sepr.py``) against the world's gold decompositions, beside the base's, with
the paired bootstrap interval of the F1 delta (the report ``learning_plans``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.learning_reading import paired_scores


def plan_f1s(root: Path, model: str, scorer) -> dict[str, float]:
    """Question id -> the SEPR F1 (``scorer``'s) of the plan ``model`` wrote for it in the
    ``apex`` mode (its first call) against the question's gold plan; 0 for a malformed plan."""
    from ragfactory.tasks.search.apex.plan_format import gold_plan_texts, parse_plan
    from ragfactory.tasks.search.apex.plan_rewrite import rewrite_steps
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(root / "wh")
    sql = """select e.question_id, c.text, q.gold_plan, q.metadata from evals e
             join llm_calls c on c.call_id = e.llm_call_ids[1] join questions q on q.question_id = e.question_id
             where e.model_id = $m and e.mode = 'apex' order by e.question_id"""
    rows = query(wh, sql, {"m": model}).to_pylist()
    plans = [parse_plan(row["text"]) for row in rows]
    scored = [(i, plan.questions, rewrite_steps(gold_plan_texts(row)))
              for i, (row, plan) in enumerate(zip(rows, plans)) if plan.error is None]  # fmt: skip
    f1 = [0.0] * len(rows)
    for (i, _, _), match in zip(scored, scorer.score_many([(p, g) for _, p, g in scored])):
        f1[i] = match.f1
    return {row["question_id"]: value for row, value in zip(rows, f1)}


def plan_rows(root: Path, models: dict[str, str]) -> list[dict]:
    """Each trained model's plans against the base's (and the last model's, the control), as SEPR
    F1 on the same test questions with the paired bootstrap interval of the delta."""
    from ragfactory.tasks.rewards.sepr import load_plan_scorer
    from ragfactory.warehouse.store import Warehouse

    scorer = load_plan_scorer(cache_dir=Warehouse(root / "wh").artifacts_dir("embeddings"))  # one encoder load
    base = plan_f1s(root, "embedded", scorer)
    scores = {label: plan_f1s(root, model, scorer) for label, model in models.items()}
    labels = list(scores)
    pairs = [(label, "base", scores[label], base) for label in labels]
    if len(labels) == 2:
        pairs.append((labels[0], labels[1], scores[labels[0]], scores[labels[1]]))
    rows = []
    for a_label, b_label, a, b in pairs:
        pair = paired_scores(a, b, f"learning_plans: {a_label} and {b_label}")
        rows.append({"plans of": a_label, "against": b_label, "n": pair["n"], "plan_f1": pair["a"],
                     "against_f1": pair["b"], "delta": pair["delta"], "low": pair["low"], "high": pair["high"]})  # fmt: skip
    return rows
