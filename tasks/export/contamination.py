"""Decontamination of training exports against evaluation questions, and the ``contamination`` rows.

General post-training pipelines decontaminate by exact match, shared word n-grams, and embedding
neighbours confirmed by a judge; this module runs those stages as a cascade over the distinct
questions of a build's training rows, each stage seeing only what the ones before it did not flag:

1. ``exact``: the normalised texts are equal (``ngrams.normalize_questions``);
2. ``ngram``: the two share a word n-gram that is not a template (``ngrams.match_ngrams``);
3. ``embedding``: the nearest evaluation question by cosine of sentence embeddings (the bundled
   MiniLM through the embedding cache, a faiss inner-product index) scores at least ``cosine``;
   with ``judge`` on, such a candidate counts only when the judge role answers "yes" to "same
   question?" (``prompts/decontamination_judge.txt``).

The export stage calls ``contaminated_rows`` on each table's rows: a row is contaminated when its
question is, and yields one ``contamination`` row naming the evaluation question, the stage and
its score. ``mode`` says what happens to the training row: ``drop`` (left out of the export),
``flag`` (kept, recorded) or ``off`` (no check).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import polars as pl

from ragfactory.tasks.export.ngrams import MATCH_COLUMNS, NgramConfig, match_exact, match_ngrams, normalize_questions
from ragfactory.tasks.llm.types import Request
from ragfactory.tasks.prompts.loader import render_prompt

MODES = ("drop", "flag", "off")
METHODS = ("exact", "ngram", "embedding")
JUDGE_PROMPT = "decontamination_judge"


@dataclass(frozen=True)
class ContaminationConfig:
    """What counts as contaminated, and what becomes of a contaminated training row."""

    mode: str = "drop"  # a held-out question must not reach training; 'flag' keeps and records
    ngram: NgramConfig = field(default_factory=NgramConfig)
    embedding: bool = True  # paraphrases share no n-gram; only their embeddings are close
    # MiniLM cosine of a paraphrase is ~0.94-0.98, of a question on the same entity asking for
    # something else ~0.66-0.94, of a shared template with other entities ~0.4-0.7 (measured on
    # hand-made pairs); 0.9 flags paraphrases and errs on the side of dropping a training row.
    # With a judge, lower it (0.8) and let the judge reject the near misses.
    cosine: float = 0.9
    judge: bool = False  # ask the judge role "same question?" about each embedding-only candidate
    judge_max_tokens: int = 4  # "yes" or "no"
    judge_in_flight: int = 16  # candidate pairs the judge works on at once

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"ContaminationConfig.mode must be one of {MODES}, got {self.mode!r}")
        if not 0.0 < self.cosine <= 1.0:
            raise ValueError(f"ContaminationConfig.cosine must be in (0, 1], got {self.cosine}")


@dataclass(frozen=True)
class EvalSet:
    """The evaluation questions training data is checked against: id, text, where from."""

    question_ids: tuple[str, ...]
    questions: tuple[str, ...]
    sources: tuple[str, ...]  # "warehouse:<partition>" or the evaluation file's path

    def __post_init__(self):
        if not len(self.question_ids) == len(self.questions) == len(self.sources):
            raise ValueError("EvalSet: question_ids, questions and sources differ in length")


EMPTY = pl.DataFrame(schema=MATCH_COLUMNS | {"method": pl.String, "judged": pl.Boolean})


def match_embeddings(train: Sequence[str], evaluation: Sequence[str], cache, cosine: float) -> pl.DataFrame:
    """(train index, eval index, cosine) for each training text whose nearest evaluation text
    (exact inner-product search over L2-normalised vectors) scores at least ``cosine``."""
    import faiss

    if not len(train) or not len(evaluation):
        return pl.DataFrame(schema=MATCH_COLUMNS)
    eval_vectors = np.ascontiguousarray(cache.vectors(list(evaluation)), dtype=np.float32)
    index = faiss.IndexFlatIP(eval_vectors.shape[1])
    index.add(eval_vectors)
    scores, nearest = index.search(np.ascontiguousarray(cache.vectors(list(train)), dtype=np.float32), 1)
    keep = np.flatnonzero(scores[:, 0] >= cosine - 1e-6)
    return pl.DataFrame({"train": keep, "eval": nearest[keep, 0], "score": scores[keep, 0]}).cast(MATCH_COLUMNS)


def judge_request(first: str, second: str, config: ContaminationConfig) -> Request:
    prompt = render_prompt(JUDGE_PROMPT, first=first, second=second)
    return Request.chat(
        [{"role": "user", "content": prompt}], role="judge", max_tokens=config.judge_max_tokens, temperature=0.0
    )


def is_yes(text: str) -> bool:
    """The judge's verdict: its first word is "yes" (any case, any punctuation after it)."""
    words = normalize_questions([text])[0].split()
    return bool(words) and words[0] == "yes"


def confirm_with_judge(pairs: Sequence[tuple[str, str]], judge, config: ContaminationConfig) -> list[bool]:
    """The judge's yes / no on each (training question, evaluation question) pair."""

    async def ask(first: str, second: str) -> bool:
        completions = await judge.generate(judge_request(first, second, config))
        return is_yes(completions[0].text)

    jobs = [partial(ask, first, second) for first, second in pairs]
    return asyncio.run(judge.run_all(jobs, config.judge_in_flight)) if jobs else []


def find_contamination(
    train: Sequence[str], eval_set: EvalSet, config: ContaminationConfig, cache=None, judge=None
) -> pl.DataFrame:
    """One row per contaminated training text: train index, eval index, method, score, and the
    judge's verdict (null unless asked). Pass distinct texts; ``cache`` embeds (an
    ``EmbeddingCache``), ``judge`` is a batcher serving the judge role."""
    if config.mode == "off" or not len(train) or not eval_set.questions:
        return EMPTY
    train_norm, eval_norm = normalize_questions(train), normalize_questions(eval_set.questions)
    found = match_exact(train_norm, eval_norm).with_columns(method=pl.lit("exact"))
    open_ = np.setdiff1d(np.arange(len(train), dtype=np.uint32), found["train"].to_numpy())
    grams = match_ngrams(train_norm[open_], eval_norm, config.ngram)
    grams = grams.with_columns(train=pl.Series(open_[grams["train"].to_numpy()], dtype=pl.UInt32))
    found = pl.concat([found, grams.with_columns(method=pl.lit("ngram"))])
    found = found.with_columns(judged=pl.lit(None, dtype=pl.Boolean))
    if config.embedding and cache is not None:
        found = pl.concat([found, _embedding_stage(train, eval_set, found, config, cache, judge)])
    return found.sort("train").cast(EMPTY.schema)


def _embedding_stage(
    train, eval_set: EvalSet, found: pl.DataFrame, config: ContaminationConfig, cache, judge
) -> pl.DataFrame:
    open_ = np.setdiff1d(np.arange(len(train), dtype=np.uint32), found["train"].to_numpy())
    near = match_embeddings([train[i] for i in open_], eval_set.questions, cache, config.cosine)
    near = near.with_columns(
        train=pl.Series(open_[near["train"].to_numpy()], dtype=pl.UInt32),
        method=pl.lit("embedding"),
        judged=pl.lit(None, dtype=pl.Boolean),
    )
    if not config.judge or not near.height:
        return near
    if judge is None:
        raise ValueError("ContaminationConfig.judge is on but no judge engine was given")
    pairs = [(train[t], eval_set.questions[e]) for t, e in near.select("train", "eval").iter_rows()]
    verdicts = pl.Series("judged", confirm_with_judge(pairs, judge, config), dtype=pl.Boolean)
    return near.with_columns(judged=verdicts).filter(pl.col("judged"))


def contamination_id(run_id: str, table: str, row_id: str) -> str:
    payload = json.dumps([run_id, table, row_id], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def contaminated_rows(
    table: str, key: str, rows: Sequence[Mapping], questions: Mapping[str, str], found: Mapping[str, Mapping], mode: str
) -> tuple[list[Mapping], list[dict]]:
    """(rows to export, ``contamination`` rows) of one export table.

    ``questions`` maps question id -> text; ``found`` maps a contaminated question id to its
    match (eval_question_id, eval_question, eval_source, method, score, judged).
    """
    kept, flagged = [], []
    for row in rows:
        match = found.get(row.get("question_id"))
        if match is None:
            kept.append(row)
            continue
        if mode == "flag":
            kept.append(row)
        flagged.append(
            {
                "contamination_id": contamination_id(row["run_id"], table, row[key]),
                "run_id": row["run_id"],
                "strategy": row.get("strategy"),
                "export_table": table,
                "row_id": row[key],
                "question_id": row["question_id"],
                "question": questions.get(row["question_id"]),
                **match,
                "action": "dropped" if mode == "drop" else "flagged",
            }
        )
    return kept, flagged


def screen_questions(
    questions: Mapping[str, str], eval_set: EvalSet, config: ContaminationConfig, cache=None, judge=None
) -> dict[str, dict]:
    """question id -> its match (eval question id and text, source, method, score, judged) for
    each contaminated training question; the texts are checked once each."""
    texts = sorted({text for text in questions.values() if text})
    found = find_contamination(texts, eval_set, config, cache, judge)
    by_text = {
        texts[t]: {
            "eval_question_id": eval_set.question_ids[e],
            "eval_question": eval_set.questions[e],
            "eval_source": eval_set.sources[e],
            "method": method,
            "score": score,
            "judged": judged,
        }
        for t, e, score, method, judged in found.select("train", "eval", "score", "method", "judged").iter_rows()
    }
    return {qid: by_text[text] for qid, text in questions.items() if text in by_text}
