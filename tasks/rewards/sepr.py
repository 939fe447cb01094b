"""Set-Equivalence Plan Reward (SEPR): Hungarian matching of sub-questions (APEX-Searcher, §2.2.1).

A predicted plan P and a gold plan G are sets of sub-questions. Each is embedded with a sentence
encoder (default all-MiniLM-L6-v2, the bundled model; the paper names "a sentence-transformer model"
only); S[i, j] is the cosine similarity of predicted i and gold j, the cost 1 - S goes to
``scipy.optimize.linear_sum_assignment`` (the Hungarian algorithm) for the one-to-one matching of
least total cost, and of its pairs those with similarity >= tau form M. Then precision = |M|/|P|,
recall = |M|/|G| and the reward is their harmonic mean (docs/papers.md, APEX-Searcher, restates the
formulas lost from the paper's text). An empty or unparsable plan scores 0. The matching sees sets,
so step order never matters, and the threshold on embeddings forgives paraphrase.

``#n`` references: a sub-question's ``#n`` names the answer of step n, so its number depends on
how the plan is ordered; a permuted plan renumbers it. Both sides therefore replace every
``#n`` by the same bare ``#`` before embedding: the sub-question keeps the mark of a dependency,
and no step number leaks into the similarity.

tau: the paper tunes its threshold "to filter low-confidence matches without penalizing valid
paraphrases" but does not print it. On ten MuSiQue dev gold plans (symbolic steps rewritten by
``plan_rewrite``) against hand-written paraphrases (tests/rewards/test_sepr_musique.py), MiniLM
puts every paraphrase at >= 0.79 and every other step of the same plan at <= 0.68 (a county's
location against its neighbour); 0.7 sits in that gap.

``sepr_reward`` (in the APEX strategy's ``training.py``) is the same score as a TRL reward function: it
reads the completion with the APEX planner's parser, which this module does not import, so the
reward stays below the strategies that use it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from ragfactory.tasks.rewards.embedding_cache import EmbeddingCache

_REFERENCE = re.compile(r"#\d+")


@dataclass(frozen=True)
class SeprConfig:
    """SEPR parameters."""

    tau: float = 0.7  # paraphrase/other-step gap of MiniLM on MuSiQue plans (module docstring)
    model: str = "all-MiniLM-L6-v2"  # bundled offline; §2.2.1 asks only for a sentence-transformer
    placeholder: str = "#"  # what every #n becomes on both sides, so numbering cannot matter

    def __post_init__(self):
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"SeprConfig.tau must be in [0, 1], got {self.tau}")


@dataclass(frozen=True)
class PlanMatch:
    """SEPR of one plan: the scores and the kept pairs (predicted step, gold step, similarity),
    steps numbered from 1 as in ``plans.steps``."""

    precision: float
    recall: float
    f1: float
    tau: float
    matched: tuple[tuple[int, int, float], ...] = ()

    def matched_rows(self) -> list[dict[str, Any]]:
        """The ``plan_scores.matched`` list."""
        return [{"predicted": p, "gold": g, "similarity": s} for p, g, s in self.matched]


def normalize_sub_question(text: str, placeholder: str = "#") -> str:
    """The text SEPR embeds: every ``#n`` made ``placeholder``, whitespace collapsed.

    >>> normalize_sub_question("When did  #2 agree to #3 ?")
    'When did # agree to # ?'
    """
    return " ".join(_REFERENCE.sub(placeholder, text).split())


def match_vectors(predicted: np.ndarray, gold: np.ndarray, tau: float) -> PlanMatch:
    """SEPR from L2-normalised vectors: rows of ``predicted`` against rows of ``gold``."""
    n_predicted, n_gold = len(predicted), len(gold)
    if n_predicted == 0 or n_gold == 0:
        return PlanMatch(0.0, 0.0, 0.0, tau)
    similarity = predicted @ gold.T
    rows, cols = linear_sum_assignment(1.0 - similarity)
    kept = tuple(
        (int(i) + 1, int(j) + 1, float(similarity[i, j])) for i, j in zip(rows, cols) if similarity[i, j] >= tau
    )
    if not kept:
        return PlanMatch(0.0, 0.0, 0.0, tau)
    precision, recall = len(kept) / n_predicted, len(kept) / n_gold
    return PlanMatch(precision, recall, 2 * precision * recall / (precision + recall), tau, kept)


class PlanScorer:
    """SEPR over an embedding cache: plans in, ``PlanMatch`` out."""

    def __init__(self, cache: EmbeddingCache, config: SeprConfig = SeprConfig()):
        self.cache = cache
        self.config = config

    @property
    def embedder_name(self) -> str:
        return self.cache.name

    def flush(self) -> None:
        """Write the embeddings computed since the last flush to the cache folder."""
        self.cache.flush()

    def score(self, predicted: Sequence[str], gold: Sequence[str]) -> PlanMatch:
        return self.score_many([(predicted, gold)])[0]

    def score_many(self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[PlanMatch]:
        """One ``PlanMatch`` per (predicted, gold) pair; every distinct text is embedded once."""
        placeholder = self.config.placeholder
        index: dict[str, int] = {}
        rows = []
        for predicted, gold in pairs:
            rows.append(
                tuple(
                    [index.setdefault(normalize_sub_question(t, placeholder), len(index)) for t in side]
                    for side in (predicted, gold)
                )
            )
        vectors = self.cache.vectors(list(index)) if index else np.zeros((0, self.cache.dim), np.float32)
        return [match_vectors(vectors[p], vectors[g], self.config.tau) for p, g in rows]


def load_plan_scorer(
    config: SeprConfig = SeprConfig(), cache_dir: str | Path | None = None, device: str | None = None
) -> PlanScorer:
    """A scorer with ``config.model`` loaded offline on its first text to embed (once per
    process: every shard shares it), its vectors cached under ``cache_dir``. A shard with no gold
    plan to match, or whose vectors are all cached, never loads the model."""
    from ragfactory.tasks.retrieval.dense import LazyEmbedder

    return PlanScorer(EmbeddingCache(LazyEmbedder(config.model, device), cache_dir), config)


def plan_score_row(
    plan_id: str, run_id: str, question_id: str, gold_plan_id: str, match: PlanMatch, embedder: str
) -> dict[str, Any]:
    """A ``plan_scores`` row."""
    return {
        "plan_id": plan_id,
        "run_id": run_id,
        "question_id": question_id,
        "gold_plan_id": gold_plan_id,
        "precision": match.precision,
        "recall": match.recall,
        "f1": match.f1,
        "tau": match.tau,
        "matched": match.matched_rows(),
        "embedder": embedder,
    }
