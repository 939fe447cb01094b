"""Decontamination on hand-picked pairs: what each stage flags, what it keeps, and why.

Evaluation questions (E1-E4) and training questions (T1-T6), normalised by hand:

E1 "Who directed the 1975 film Jaws, adapted from the novel by Peter Benchley?"
   -> "who directed 1975 film jaws adapted from novel by peter benchley"
E2 "Which is older, the Eiffel Tower or the Statue of Liberty?"
E3 "Were Scott Derrickson and Ed Wood of the same nationality?"
   -> "were scott derrickson and ed wood of same nationality"
E4 "What is the name of the fight song of the university whose main campus is in Lawrence, Kansas
   and whose branch campuses are in the Kansas City metropolitan area?"

T1 an exact copy of E1                                        -> exact, E1, score 1
T2 E1 re-cased and re-punctuated ("WHO DIRECTED THE 1975 FILM 'JAWS' -- ADAPTED ...") -> the same
   normalised text                                            -> exact, E1
T3 "Besides its football team, what is the name of the fight song of the university whose main
   campus is in Lawrence, Kansas?" -> shares the 15-word span "what is name of fight song of
   university whose main campus is in lawrence kansas" with E4: its 19 normalised words make 12
   8-grams, of which the 8 inside that span (15 - 8 + 1) are shared -> ngram, E4, score 8/12
T4 "Did Scott Derrickson and Ed Wood share the same nationality?" -> a paraphrase of E3; its
   longest shared span is "scott derrickson and ed wood" (5 words), so only the embedding stage
   sees it (MiniLM cosine ~0.98 >= 0.9)                        -> embedding, E3
T5 "How much money did the 1975 film Jaws make at the box office?" -> about E1's film, asking
   something else: shares "1975 film jaws" (3 words), cosine ~0.77 < 0.9 -> kept
T6 "Which is older, Harvard University or Yale University?" -> E2's template only, cosine
   ~0.42                                                       -> kept
"""

from __future__ import annotations

import polars as pl
import pytest

from ragfactory.tasks.export.contamination import (
    ContaminationConfig,
    EvalSet,
    contaminated_rows,
    find_contamination,
    is_yes,
    screen_questions,
)
from ragfactory.tasks.export.ngrams import NgramConfig, match_ngrams, normalize_questions
from ragfactory.tasks.llm.cache import CallCache
from ragfactory.tasks.llm.config import LLMConfig
from ragfactory.tasks.llm.engine import make_batcher
from ragfactory.tasks.rewards.answer import normalize_answer
from ragfactory.tasks.rewards.embedding_cache import EmbeddingCache
from tests.fakes import ScriptedBackend, TableEmbedder

EVAL = {
    "e1": "Who directed the 1975 film Jaws, adapted from the novel by Peter Benchley?",
    "e2": "Which is older, the Eiffel Tower or the Statue of Liberty?",
    "e3": "Were Scott Derrickson and Ed Wood of the same nationality?",
    "e4": "What is the name of the fight song of the university whose main campus is in Lawrence, "
    "Kansas and whose branch campuses are in the Kansas City metropolitan area?",
}
TRAIN = {
    "t1": EVAL["e1"],
    "t2": "WHO DIRECTED THE 1975 FILM 'JAWS' -- ADAPTED FROM THE NOVEL BY PETER BENCHLEY",
    "t3": "Besides its football team, what is the name of the fight song of the university whose "
    "main campus is in Lawrence, Kansas?",
    "t4": "Did Scott Derrickson and Ed Wood share the same nationality?",
    "t5": "How much money did the 1975 film Jaws make at the box office?",
    "t6": "Which is older, Harvard University or Yale University?",
}
EVAL_SET = EvalSet(tuple(EVAL), tuple(EVAL.values()), ("warehouse:test",) * len(EVAL))


@pytest.fixture(scope="module")
def minilm():
    from ragfactory.tasks.retrieval.dense import LazyEmbedder

    return EmbeddingCache(LazyEmbedder())


def test_normalisation_is_the_answer_normalisation_on_ascii():
    texts = ["The Eiffel Tower!", "  Hewlett-Packard, an  American company ", "Theatre of the absurd?"]
    assert normalize_questions(texts).to_list() == [normalize_answer(t) for t in texts]
    assert normalize_questions([TRAIN["t2"]]).to_list() == [
        "who directed 1975 film jaws adapted from novel by peter benchley"
    ]


def test_hand_picked_pairs(minilm):
    found = screen_questions(TRAIN, EVAL_SET, ContaminationConfig(), cache=minilm)
    assert sorted(found) == ["t1", "t2", "t3", "t4"]
    assert {q: (m["eval_question_id"], m["method"]) for q, m in found.items()} == {
        "t1": ("e1", "exact"),
        "t2": ("e1", "exact"),
        "t3": ("e4", "ngram"),
        "t4": ("e3", "embedding"),
    }
    assert found["t1"]["score"] == found["t2"]["score"] == 1.0
    assert found["t3"]["score"] == pytest.approx(8 / 12)
    assert found["t4"]["score"] >= 0.9 and found["t4"]["judged"] is None
    assert found["t4"]["eval_question"] == EVAL["e3"] and found["t4"]["eval_source"] == "warehouse:test"


def test_without_the_embedding_stage_the_paraphrase_passes():
    found = screen_questions(TRAIN, EVAL_SET, ContaminationConfig(embedding=False))
    assert sorted(found) == ["t1", "t2", "t3"]


def test_contamination_rows_name_the_evaluation_question_and_drop_or_flag(minilm):
    found = screen_questions(TRAIN, EVAL_SET, ContaminationConfig(), cache=minilm)
    rows = [{"example_id": f"x-{q}", "run_id": "r", "strategy": "decex", "question_id": q} for q in TRAIN]
    kept, flagged = contaminated_rows("sft_examples", "example_id", rows, TRAIN, found, "drop")
    assert [r["question_id"] for r in kept] == ["t5", "t6"]
    assert [(f["row_id"], f["eval_question_id"], f["method"], f["action"]) for f in flagged] == [
        ("x-t1", "e1", "exact", "dropped"),
        ("x-t2", "e1", "exact", "dropped"),
        ("x-t3", "e4", "ngram", "dropped"),
        ("x-t4", "e3", "embedding", "dropped"),
    ]
    assert flagged[2]["question"] == TRAIN["t3"] and flagged[2]["export_table"] == "sft_examples"
    kept, flagged = contaminated_rows("sft_examples", "example_id", rows, TRAIN, found, "flag")
    assert len(kept) == 6 and {f["action"] for f in flagged} == {"flagged"}


def test_off_checks_nothing():
    assert find_contamination(list(TRAIN.values()), EVAL_SET, ContaminationConfig(mode="off")).height == 0


def test_an_ngram_never_spans_two_questions():
    # "a b c d" + "e f g h" would be the 8-gram of the evaluation question if questions ran together
    train = normalize_questions(["w1 w2 w3 w4", "w5 w6 w7 w8"])
    evaluation = normalize_questions(["w1 w2 w3 w4 w5 w6 w7 w8"])
    assert match_ngrams(train, evaluation).height == 0
    assert match_ngrams(normalize_questions(["w0 w1 w2 w3 w4 w5 w6 w7 w8"]), evaluation).to_dicts() == [
        {"train": 0, "eval": 0, "score": 0.5}
    ]  # 2 8-grams, 1 shared


def test_an_ngram_in_many_questions_is_a_template():
    template = "what is the date of death of the director of film {}"
    evaluation = normalize_questions([template.format(f"Film{i}") for i in range(10)])
    train = normalize_questions([template.format("Metropolis")])
    # every word content (common_min 100), so only max_questions decides: "what is date of death
    # of director of" is in 11 questions, above 10; with 11 allowed, 2 of the 3 8-grams are shared
    assert match_ngrams(train, evaluation, NgramConfig(max_questions=10, common_min=100)).height == 0
    assert match_ngrams(train, evaluation, NgramConfig(max_questions=11, common_min=100))["score"].to_list() == [2 / 3]
    # by default the template's words (in 11 questions > 10) are not content words: no evidence
    assert match_ngrams(train, evaluation, NgramConfig(max_questions=11)).height == 0


def test_a_template_and_the_first_word_of_a_name_is_not_a_copy():
    template = "what is the date of death of the director of film {}"
    evaluation = normalize_questions(
        [template.format(f"Film{i} Part") for i in range(12)] + [template.format("Sijapi Didofi")]
    )
    # "date of death of director of film sijapi": 8 words, one content word (sijapi)
    assert match_ngrams(normalize_questions([template.format("Sijapi Xoro")]), evaluation).height == 0
    # the whole name shared: "of death of director of film sijapi didofi" holds two content words
    copied = match_ngrams(normalize_questions([template.format("Sijapi Didofi Xoro")]), evaluation)
    assert copied["eval"].to_list() == [12]


def _judge(verdicts: dict[str, str]) -> ScriptedBackend:
    """A judge answering by the training question its prompt holds."""

    def reply(request, sample):
        return next(answer for text, answer in verdicts.items() if text in request.messages[-1].content)

    return ScriptedBackend(reply, fingerprint="judge")


def test_the_judge_confirms_or_rejects_embedding_candidates():
    close = {
        "Who played the shark?": [1.0, 0.0],
        "Which actor was the shark?": [0.95, 0.312],
        "Who was the mother of the director?": [0.92, 0.392],
    }
    cache = EmbeddingCache(TableEmbedder(close))
    eval_set = EvalSet(("e",), ("Who played the shark?",), ("warehouse:test",))
    train = ["Which actor was the shark?", "Who was the mother of the director?"]
    without = find_contamination(train, eval_set, ContaminationConfig(), cache)
    assert without["train"].to_list() == [0, 1] and without["judged"].to_list() == [None, None]
    backend = _judge({train[0]: "Yes.", train[1]: "no"})
    judge = make_batcher(LLMConfig(), CallCache("r"), backends={"judge": backend})
    judged = find_contamination(train, eval_set, ContaminationConfig(judge=True), cache, judge)
    assert judged.select("train", "method", "judged").to_dicts() == [
        {"train": 0, "method": "embedding", "judged": True}
    ]
    assert backend.calls == 1 and len(backend.batches[0]) == 2
    with pytest.raises(ValueError, match="no judge"):
        find_contamination(train, eval_set, ContaminationConfig(judge=True), cache)


@pytest.mark.parametrize(
    "text,verdict",
    [("Yes", True), ("yes, the same", True), (" YES.", True), ("No", False), ("", False), ("I think yes", False)],
)
def test_judge_verdicts(text, verdict):
    assert is_yes(text) is verdict


def test_cosine_threshold_is_inclusive():
    cache = EmbeddingCache(TableEmbedder({"q": [1.0, 0.0], "p": [0.9, 0.43588989]}))
    eval_set = EvalSet(("e",), ("q",), ("f",))
    hit = find_contamination(["p"], eval_set, ContaminationConfig(cosine=0.9), cache)
    assert hit["method"].to_list() == ["embedding"] and hit["score"][0] == pytest.approx(0.9, abs=1e-6)
    assert find_contamination(["p"], eval_set, ContaminationConfig(cosine=0.91), cache).height == 0
    assert isinstance(hit, pl.DataFrame)
