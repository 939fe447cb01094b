"""One dataset's questions through every evaluation mode, scored into ``evals`` rows.

Every (mode, question) pair is one job for ``Batcher.run_all``, so ``max_in_flight`` questions of
all modes run at once and their pending requests go to the engine as one batch
(docs/architecture.md, "Core contracts"). Each outcome becomes an ``evals`` row with EM, F1 and
cover-EM against the golden answers (``rewards/answer.py``), its retrieval and step counts, its
format errors and the llm calls it used. Row ids hash (run, dataset, mode, question), and the run id
hashes the model and every setting that shapes an answer, so re-running an evaluation replaces its
rows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial

from ragfactory.progress import progress_bar
from ragfactory.tasks.eval.baselines import answer_direct, answer_rag
from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig, Outcome
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.types import Generator
from ragfactory.tasks.retrieval.ledger import asking
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.rewards.answer import METRICS

Mode = Callable[[EvalQuestion, Generator, Retriever | None, InferenceConfig], Awaitable[Outcome]]
# The built-in modes; a strategy adds the inference its data trains (``Strategy.evaluation``:
# ReasonRAG's agentic loop), ``eval_modes`` merges them.
BUILTIN_MODES: dict[str, Mode] = {"direct": answer_direct, "rag": answer_rag}
CLOSED_BOOK_MODES = frozenset({"direct"})  # every other mode searches
AGGREGATE_COLUMNS = ("em", "f1", "cover_em", "n_retrievals", "n_steps")


def eval_modes() -> dict[str, Mode]:
    """Every evaluation mode by name: the built-ins and those the registered strategies add."""
    from ragfactory.tasks.search.registry import STRATEGIES

    added = STRATEGIES.declared("evaluation", "MODES")
    clash = sorted(set(added) & set(BUILTIN_MODES))
    if clash:
        raise ValueError(f"strategies declare the built-in evaluation modes {clash} again")
    return {**added, **BUILTIN_MODES}


def check_modes(names: Iterable[str]) -> list[str]:
    """The modes, or an error naming the unknown ones and the known ones."""
    names = list(names)
    unknown = sorted(set(names) - set(eval_modes()))
    if unknown:
        raise ValueError(f"unknown evaluation modes {unknown}; known: {sorted(eval_modes())}")
    return names


def needs_retriever(modes: Iterable[str]) -> bool:
    return any(mode not in CLOSED_BOOK_MODES for mode in modes)


def eval_hash(model_id: str, settings: Mapping) -> str:
    """A stable hash of the model and the settings that shape its answers.

    The eval run is ``eval-<hash>``, so the same evaluation always lands in the same partition.
    """
    payload = json.dumps({"model_id": model_id, "settings": settings}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def eval_id(run_id: str, dataset: str, mode: str, question_id: str) -> str:
    payload = json.dumps([run_id, dataset, mode, question_id], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def shard_of(dataset: str, mode: str) -> str:
    """The shard name of one dataset's rows for one mode (in ``evals`` and ``llm_calls``; its
    ``retrievals`` are one shard for every mode, mode ``search``)."""
    return f"{dataset}-{mode}"


async def answer_questions(
    questions: Sequence[EvalQuestion],
    modes: Sequence[str],
    batcher: Batcher,
    retriever: Retriever | None,
    config: InferenceConfig,
    max_in_flight: int,
) -> dict[str, list[Outcome]]:
    """mode -> the outcome of each question, in question order."""
    answer = eval_modes()  # the strategies' declared modes, gathered once rather than per question
    with progress_bar() as bar:
        task = bar.add_task(f"{', '.join(modes)}: questions answered", total=len(questions) * len(modes))
        jobs = [
            partial(_attributed, q.question_id, partial(answer[mode], q, batcher, retriever, config), bar, task)
            for mode in check_modes(modes)
            for q in questions
        ]
        outcomes = await batcher.run_all(jobs, max_in_flight)
    n = len(questions)
    return {mode: outcomes[i * n : (i + 1) * n] for i, mode in enumerate(modes)}


async def _attributed(question_id: str, job: Callable[[], Awaitable[Outcome]], bar, task) -> Outcome:
    """The job's searches go to the retrieval ledger as this question's; the bar counts it done."""
    with asking(question_id):
        outcome = await job()
    bar.advance(task)
    return outcome


def eval_rows(
    run_id: str,
    model_id: str,
    dataset: str,
    mode: str,
    questions: Sequence[EvalQuestion],
    outcomes: Sequence[Outcome],
    created_at: datetime,
    partition: str | None = None,
    seen: Collection[str] = (),
) -> list[dict]:
    """One ``evals`` row per question: the prediction, its scores and what it cost, the partition
    it was drawn from, and whether the model trained on it (its id is in ``seen``)."""
    rows = []
    for question, outcome in zip(questions, outcomes, strict=True):
        scores = {name: metric(outcome.prediction, question.golden_answers) for name, metric in METRICS.items()}
        rows.append(
            {
                "eval_id": eval_id(run_id, dataset, mode, question.question_id),
                "run_id": run_id,
                "model_id": model_id,
                "dataset": dataset,
                "mode": mode,
                "question_id": question.question_id,
                "prediction": outcome.prediction,
                **scores,
                "n_retrievals": outcome.n_retrievals,
                "n_steps": outcome.n_steps,
                "format_error": outcome.format_error,
                "llm_call_ids": list(outcome.call_ids),
                "created_at": created_at,
                "partition": partition,
                "is_seen": question.question_id in seen,
            }
        )
    return rows


def aggregate(rows: Iterable[Mapping]) -> list[dict]:
    """Per (model, dataset, mode): question count, mean metrics and costs, format errors, and how
    many of the questions the model trained on."""
    groups: dict[tuple[str, str, str], list[Mapping]] = {}
    for row in rows:
        groups.setdefault((row["model_id"], row["dataset"], row["mode"]), []).append(row)
    summary = []
    for (model_id, dataset, mode), members in sorted(groups.items()):
        means = {col: sum(float(r[col]) for r in members) / len(members) for col in AGGREGATE_COLUMNS}
        summary.append(
            {
                "model_id": model_id,
                "dataset": dataset,
                "mode": mode,
                "n_questions": len(members),
                **means,
                "n_format_errors": sum(1 for r in members if r.get("format_error")),
                "n_seen": sum(1 for r in members if r.get("is_seen")),
            }
        )
    return summary


def calls_of(rows: Sequence[Mapping], call_rows: Iterable[Mapping]) -> list[dict]:
    """The ``llm_calls`` rows the given ``evals`` rows used, ordered by call id."""
    wanted = {cid for row in rows for cid in row["llm_call_ids"]}
    return sorted((dict(r) for r in call_rows if r["call_id"] in wanted), key=lambda r: r["call_id"])
