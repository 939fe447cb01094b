"""SEPR (APEX-Searcher, §2.2.1): order-invariant, paraphrase-robust F1 over matched sub-questions.

The table embedder sets cosine similarities exactly: gold steps g1..g3 are orthogonal unit
vectors; a paraphrase of g1 sits at cosine 0.8 (above tau = 0.7), a loose rewording at 0.6 (below).
"""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest

from ragfactory.tasks.rewards import functions as stock_rewards
from ragfactory.tasks.rewards.embedding_cache import EmbeddingCache, HashingEmbedder
from ragfactory.tasks.rewards.sepr import (
    PlanMatch,
    PlanScorer,
    SeprConfig,
    match_vectors,
    normalize_sub_question,
    plan_score_row,
)
from ragfactory.tasks.search.apex import training as apex_training
from ragfactory.tasks.search.apex.training import sepr_reward
from ragfactory.warehouse.store import conform
from tests.fakes import TableEmbedder

G1, G2, G3 = "Who directed Jaws?", "Who is the mother of #?", "Where was # born?"
PARAPHRASE = "Which person was the director of Jaws?"  # cosine 0.8 with G1
LOOSE = "Tell me about the film Jaws."  # cosine 0.6 with G1
OTHER = "When was Jaws released?"  # orthogonal to every gold step
TABLE = {
    G1: [1, 0, 0, 0, 0],
    G2: [0, 1, 0, 0, 0],
    G3: [0, 0, 1, 0, 0],
    PARAPHRASE: [0.8, 0, 0, 0.6, 0],
    LOOSE: [0.6, 0, 0, 0, 0.8],
    OTHER: [0, 0, 0, 0, 1],
}
GOLD = ["Who directed Jaws?", "Who is the mother of #1?", "Where was #2 born?"]


@pytest.fixture
def scorer():
    return PlanScorer(EmbeddingCache(TableEmbedder(TABLE)))


@pytest.mark.parametrize(
    "predicted, expected",  # (precision, recall, f1)
    [
        (GOLD, (1.0, 1.0, 1.0)),
        (["Where was #2 born?", "Who directed Jaws?", "Who is the mother of #1?"], (1.0, 1.0, 1.0)),
        # renumbered references of a reordered plan are the same sub-questions
        (["Who is the mother of #3?", "Where was #1 born?", "Who directed Jaws?"], (1.0, 1.0, 1.0)),
        ([PARAPHRASE, "Who is the mother of #1?", "Where was #2 born?"], (1.0, 1.0, 1.0)),
        ([LOOSE, "Who is the mother of #1?", "Where was #2 born?"], (2 / 3, 2 / 3, 2 / 3)),
        (GOLD + [OTHER], (3 / 4, 1.0, 6 / 7)),  # an extra step lowers precision only
        (GOLD[:2], (1.0, 2 / 3, 0.8)),  # a missing step lowers recall only
        ([], (0.0, 0.0, 0.0)),
        ([OTHER], (0.0, 0.0, 0.0)),
    ],
    ids=["identical", "permuted", "renumbered", "paraphrased", "below-tau", "extra", "missing", "empty", "unrelated"],
)
def test_sepr_properties(scorer, predicted, expected):
    match = scorer.score(predicted, GOLD)
    assert (match.precision, match.recall, match.f1) == pytest.approx(expected)
    assert len(match.matched) == round(expected[0] * len(predicted))
    assert all(similarity >= 0.7 for _, _, similarity in match.matched)


def test_matched_pairs_name_steps_from_one(scorer):
    match = scorer.score([OTHER, "Where was #1 born?", PARAPHRASE], GOLD)
    assert [(p, g) for p, g, _ in match.matched] == [(2, 3), (3, 1)]
    assert [s for _, _, s in match.matched] == pytest.approx([1.0, 0.8])


def test_empty_gold_scores_zero(scorer):
    assert scorer.score(GOLD, []) == PlanMatch(0.0, 0.0, 0.0, 0.7)


def test_hungarian_beats_greedy_matching():
    """p1 is closest to g2, but only p1-g1 with p2-g2 matches both: least total cost wins."""
    similarity = np.array([[0.9, 0.95], [0.2, 0.9]], dtype=np.float32)
    match = match_vectors(similarity, np.eye(2, dtype=np.float32), tau=0.7)
    assert [(p, g) for p, g, _ in match.matched] == [(1, 1), (2, 2)]
    assert match.f1 == 1.0


@pytest.mark.parametrize("tau, n_matched", [(0.0, 2), (0.85, 1), (0.95, 0)])
def test_threshold_drops_weak_pairs_after_matching(tau, n_matched):
    similarity = np.array([[0.9, 0.1], [0.1, 0.8]], dtype=np.float32)
    assert len(match_vectors(similarity, np.eye(2, dtype=np.float32), tau).matched) == n_matched


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Who is the father of #1?", "Who is the father of #?"),
        ("when did  #2 join #13 ?", "when did # join # ?"),
        ("No reference here", "No reference here"),
    ],
)
def test_references_become_one_placeholder(text, expected):
    assert normalize_sub_question(text) == expected


def test_config_refuses_a_threshold_outside_the_unit_interval():
    with pytest.raises(ValueError, match="SeprConfig.tau"):
        SeprConfig(tau=1.5)


def test_score_many_embeds_each_distinct_text_once():
    embedder = TableEmbedder(TABLE)
    scorer = PlanScorer(EmbeddingCache(embedder))
    matches = scorer.score_many([(GOLD, GOLD), (GOLD[::-1], GOLD), ([PARAPHRASE], GOLD)])
    assert [m.f1 for m in matches] == pytest.approx([1.0, 1.0, 0.5])
    assert len(embedder.batches) == 1 and len(embedder.batches[0]) == 4


def test_plan_score_row_fits_the_table(scorer):
    match = scorer.score([PARAPHRASE, OTHER], GOLD)
    row = plan_score_row("p1", "run-1", "q1", "g1", match, scorer.embedder_name)
    table = conform("plan_scores", [row])
    expected = [[{"predicted": 1, "gold": 1, "similarity": pytest.approx(0.8)}]]
    assert table.column("matched").to_pylist() == expected
    assert table.column("f1").to_pylist() == [pytest.approx(0.4)]  # P 1/2, R 1/3


# ---- the TRL reward ------------------------------------------------------------------------


def test_reward_docstring_example_runs():
    results = [doctest.testmod(m, optionflags=doctest.ELLIPSIS) for m in (stock_rewards, apex_training)]
    assert sum(r.attempted for r in results) >= 8 and sum(r.failed for r in results) == 0


def _plan(*steps: str) -> str:
    return "<plan>\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)) + "\n</plan>"


@pytest.mark.parametrize(
    "completion, expected",
    [
        (_plan(*GOLD), 1.0),
        ([{"role": "assistant", "content": _plan(*GOLD)}], 1.0),  # conversational
        (_plan(GOLD[0], GOLD[1]), 0.8),
        ("I would just search for it.", 0.0),  # no plan
        (_plan("Who is the mother of #2?", GOLD[0]), 0.0),  # a forward reference: malformed
        (_plan(*(GOLD + [OTHER] * 3)), 0.0),  # six steps exceed the bound of five
    ],
    ids=["exact", "conversational", "missing-step", "no-plan", "forward-ref", "too-long"],
)
def test_reward_reads_completions_and_json_gold(scorer, completion, expected):
    gold = json.dumps([{"step": i, "question": q, "original": q} for i, q in enumerate(GOLD, 1)])
    rewards = sepr_reward(
        prompts=["p"],
        completions=[completion],
        gold_plan=[gold],
        scorer=scorer,
        completion_ids=[[1, 2]],
        trainer_state=None,
    )
    assert rewards == [pytest.approx(expected)]


def test_reward_names_the_row_with_a_bad_gold_plan(scorer):
    with pytest.raises(ValueError, match="gold_plan of row 1"):
        gold = ['["Who directed Jaws?"]', "not json"]
        sepr_reward(["p", "p"], [_plan(G1)] * 2, gold_plan=gold, scorer=scorer)
    with pytest.raises(ValueError, match="gold_plan column"):
        sepr_reward(["p"], [_plan(G1)], scorer=scorer)


def test_reward_trains_with_hashing_embedder_on_lexical_overlap():
    scorer = PlanScorer(EmbeddingCache(HashingEmbedder()), SeprConfig(tau=0.99))
    rewards = sepr_reward(
        ["p"] * 2,
        [_plan("who directed JAWS ?"), _plan("Who wrote Jaws?")],
        gold_plan=['["Who directed Jaws?"]'] * 2,
        scorer=scorer,
    )
    assert rewards == [pytest.approx(1.0), 0.0]
