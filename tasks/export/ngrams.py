"""Exact and shared-word-n-gram matches between training questions and evaluation questions.

The first two stages of decontamination (``contamination.py``), the checks general post-training
pipelines run on their training sets: a training question whose normalised text equals an
evaluation question's, or that shares any word n-gram with one (GPT-3 used 13-grams over
documents; for single questions of 10 to 30 words, 8 is the default here). Normalisation is the
SQuAD / HotpotQA answer normalisation (``rewards/answer.py``: lower case, punctuation deleted,
the articles a / an / the dropped, whitespace collapsed), after NFKC and with Unicode punctuation
and symbols deleted too, so a re-cased or re-punctuated copy is an exact match.

Everything is columnar: texts are normalised and split by polars, every token is hashed once, and
an n-gram's hash is a sum of its token hashes times fixed odd 64-bit multipliers per position
(wrapping uint64 arithmetic, one numpy pass per position, never a loop over questions); the
n-gram index is a hash join. Templates are not evidence that two questions are the same: an
n-gram that occurs in more than ``max_questions`` distinct questions (training and evaluation
together) is ignored ("what is the date of death of the director of film"), and so is one with
fewer than ``min_content`` content words, words found in at most 1 % of the questions (a
template plus the first word of a name). Questions shorter than n words have no n-grams; exact
match and the embedding stage cover them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

PUNCTUATION = r"[\p{P}\p{S}]"  # every Unicode punctuation mark and symbol, ASCII's included
ARTICLES = r"\b(a|an|the)\b"
MATCH_COLUMNS = {"train": pl.UInt32, "eval": pl.UInt32, "score": pl.Float64}
_MULTIPLIERS = np.random.default_rng(20240531).integers(1, 2**63, size=64, dtype=np.uint64) * 2 + 1


@dataclass(frozen=True)
class NgramConfig:
    """The shared-n-gram test."""

    n: int = 8  # words; long enough that a shared span is a copy, short enough for one question
    max_questions: int = 10  # an n-gram in more distinct questions than this is a template
    # A shared n-gram must hold this many content words: a template plus the first word of a
    # name ("... the director of film John") is not a copy of another question about "John Doe".
    min_content: int = 2
    common_share: float = 0.01  # a word in more than 1 % of the questions is a template word
    common_min: int = 10  # ... and in more than 10 of them: in a small set every word is content
    token_seed: int = 0  # seed of the token hash; any value gives the same matches

    def __post_init__(self):
        if not 1 <= self.n <= len(_MULTIPLIERS):
            raise ValueError(f"NgramConfig.n must be in 1..{len(_MULTIPLIERS)}, got {self.n}")
        if not 0 <= self.min_content <= self.n:
            raise ValueError(f"NgramConfig.min_content must be in 0..n, got {self.min_content}")
        if self.max_questions < 2:
            raise ValueError(f"NgramConfig.max_questions must be >= 2 (a match needs two), got {self.max_questions}")


def normalize_questions(texts: Sequence[str] | pl.Series) -> pl.Series:
    """Each text lower-cased, NFKC, punctuation and articles removed, whitespace collapsed."""
    series = texts if isinstance(texts, pl.Series) else pl.Series("text", list(texts), dtype=pl.String)
    return (
        series.fill_null("")
        .str.normalize("NFKC")
        .str.to_lowercase()
        .str.replace_all(PUNCTUATION, "")
        .str.replace_all(ARTICLES, " ")
        .str.replace_all(r"\s+", " ")
        .str.strip_chars()
    )


def match_exact(train: pl.Series, evaluation: pl.Series) -> pl.DataFrame:
    """(train index, eval index, 1.0) for normalised texts that are equal; the first evaluation
    question of equal ones is named."""
    left = pl.DataFrame({"norm": train}).with_row_index("train").filter(pl.col("norm") != "")
    right = pl.DataFrame({"norm": evaluation}).with_row_index("eval").unique("norm", keep="first")
    found = left.join(right, on="norm").select("train", "eval").with_columns(score=pl.lit(1.0))
    return found.sort("train").cast(MATCH_COLUMNS)


def tokenize(normalized: pl.Series) -> pl.DataFrame:
    """One (question index, token) row per word of each normalised text, in order."""
    return (
        pl.DataFrame({"token": normalized.str.split(" ")})
        .with_row_index("question")
        .explode("token")
        .filter(pl.col("token").is_not_null() & (pl.col("token") != ""))
    )


def mark_content(
    train: pl.DataFrame, evaluation: pl.DataFrame, config: NgramConfig
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Both token frames with ``is_content``: the word is in at most max(common_min, common_share x
    questions) distinct questions, training and evaluation together."""
    n_questions = train["question"].n_unique() + evaluation["question"].n_unique()
    limit = max(config.common_min, config.common_share * n_questions)
    spread = pl.concat([train.unique(["question", "token"]), evaluation.unique(["question", "token"])])
    common = spread.group_by("token").len().filter(pl.col("len") > limit)["token"]
    is_content = pl.col("token").is_in(common).not_().alias("is_content")  # keeps the word order
    return train.with_columns(is_content), evaluation.with_columns(is_content)


def ngram_hashes(tokens: pl.DataFrame, config: NgramConfig) -> pl.DataFrame:
    """One (question, n-gram hash) row per distinct word n-gram of each question that holds at
    least ``min_content`` content words; ``tokens`` is ``mark_content``'s output."""
    question = tokens["question"].to_numpy()
    token_hash = tokens["token"].hash(seed=config.token_seed).to_numpy()
    starts = len(question) - config.n + 1
    if starts <= 0:
        return pl.DataFrame(schema={"question": pl.UInt32, "hash": pl.UInt64})
    hashes = np.zeros(starts, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for position in range(config.n):
            hashes += token_hash[position : position + starts] * _MULTIPLIERS[position]
    content = np.concatenate([[0], np.cumsum(tokens["is_content"].to_numpy().astype(np.int64))])
    n_content = content[config.n :] - content[:starts]
    keep = (question[:starts] == question[config.n - 1 :]) & (n_content >= config.min_content)
    return pl.DataFrame({"question": question[:starts][keep], "hash": hashes[keep]}).unique()


def match_ngrams(train: pl.Series, evaluation: pl.Series, config: NgramConfig = NgramConfig()) -> pl.DataFrame:
    """(train index, eval index, share of the training question's evidence n-grams found in it)
    for the evaluation question sharing the most evidence n-grams with each training question.

    Pass distinct training texts: a text repeated in the input counts as several questions when
    telling templates from evidence.
    """
    train_tokens, eval_tokens = mark_content(tokenize(train), tokenize(evaluation), config)
    train_grams, eval_grams = ngram_hashes(train_tokens, config), ngram_hashes(eval_tokens, config)
    spread = pl.concat([train_grams, eval_grams]).group_by("hash").agg(pl.len().alias("n_questions"))
    evidence = spread.filter(pl.col("n_questions") <= config.max_questions).select("hash")
    shared = (
        train_grams.rename({"question": "train"})
        .join(evidence, on="hash")
        .join(eval_grams.rename({"question": "eval"}), on="hash")
    )
    counts = shared.group_by("train", "eval").agg(pl.len().alias("shared"))
    totals = train_grams.group_by("question").agg(pl.len().alias("total")).rename({"question": "train"})
    best = (
        counts.join(totals, on="train")
        .with_columns(score=pl.col("shared") / pl.col("total"))
        .sort(["train", "shared", "eval"], descending=[False, True, False])
        .unique("train", keep="first")
    )
    return best.select("train", "eval", "score").sort("train").cast(MATCH_COLUMNS)
