"""Agentic GRPO (``tasks/training/agentic.py``): a search turn gets the build's passages as a masked
observation, an answer ends the rollout, the budget cuts; R3-RAG's process reward worked by hand;
one GRPO step of a tiny random Llama through TRL's ``rollout_func``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from ragfactory.tasks.retrieval.factory import make_retriever
from ragfactory.tasks.search.r3.config import R3Config
from ragfactory.tasks.search.r3.training import R3ProcessReward, outcome
from ragfactory.tasks.training.agentic import (
    ROLLOUT_LOG,
    AgenticOptions,
    Rollout,
    build_trainer,
    observe,
    qa_rows,
    turn_end,
)
from ragfactory.tasks.training.methods import MethodContext
from ragfactory.tasks.training.runs import run_training
from ragfactory.tasks.training.trainers import load_model

PASSAGES = pa.table(
    {
        "passage_id": ["p-jaws", "p-et", "p-paris"],
        "title": ["Jaws", "E.T.", "Paris"],
        "text": [
            "Jaws is a 1975 thriller directed by Steven Spielberg.",
            "E.T. the Extra-Terrestrial is a 1982 film about an alien.",
            "Paris is the capital and largest city of France.",
        ],
    }
)
SEARCH_TURN = "<reason>Look it up.</reason> <search> Jaws director </search>"
ANSWER_TURN = "<reason>Found it.</reason> <answer> Steven Spielberg </answer>"


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return load_model(tiny_model)[1]


@pytest.fixture(scope="module")
def bm25():
    return make_retriever("bm25", passages=PASSAGES)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_a_search_turn_gets_its_passages_as_a_masked_observation(tokenizer, bm25):
    rollout = Rollout([1, 2], [], [], [], [])
    turn = ids(tokenizer, SEARCH_TURN)
    observe(rollout, turn, tokenizer, bm25, AgenticOptions(top_k=1), budget=256, eos_ids={tokenizer.eos_token_id})
    observation = (
        "\n\n<information>Doc 1(Title: Jaws) Jaws is a 1975 thriller directed by Steven Spielberg.\n</information>\n\n"
    )
    assert rollout.queries == ["Jaws director"]
    assert [h["passage_id"] for h in rollout.hits[0]] == ["p-jaws"]
    assert rollout.ids == turn + ids(tokenizer, observation)
    assert rollout.mask == [1] * len(turn) + [0] * len(ids(tokenizer, observation))
    # the masked tokens are exactly the observation's text, the unmasked ones the model's turn
    masked = [t for t, m in zip(rollout.ids, rollout.mask) if m == 0]
    assert tokenizer.decode(masked) == observation
    assert not rollout.done


def test_an_answer_or_a_turn_without_action_ends_the_rollout_without_retrieving(tokenizer, bm25):
    for text in (ANSWER_TURN, "I think it was somebody famous."):
        rollout = Rollout([1], [], [], [], [])
        observe(rollout, ids(tokenizer, text), tokenizer, bm25, AgenticOptions(), 256, {tokenizer.eos_token_id})
        assert rollout.done and rollout.queries == [] and rollout.mask == [1] * len(rollout.ids)


def test_the_budget_cuts_the_observation_and_ends_the_rollout(tokenizer, bm25):
    turn = ids(tokenizer, SEARCH_TURN)
    rollout = Rollout([1], [], [], [], [])
    observe(rollout, turn, tokenizer, bm25, AgenticOptions(top_k=1), len(turn) + 5, {tokenizer.eos_token_id})
    assert len(rollout.ids) == len(turn) + 5 and rollout.mask[-5:] == [0] * 5 and rollout.done


def test_a_turn_ends_at_its_stop_string_or_end_of_sequence(tokenizer):
    turn = ids(tokenizer, SEARCH_TURN)
    eos = tokenizer.eos_token_id
    padded = turn + [eos, eos, eos]  # generate pads a row that stopped before the others
    assert turn_end(tokenizer, padded, {eos}) == len(turn)
    answer = ids(tokenizer, "<answer> Paris")
    assert turn_end(tokenizer, answer + [eos, eos], {eos}) == len(answer) + 1  # the model's own end
    assert turn_end(tokenizer, answer, {eos}) == len(answer)  # cut by the budget


def test_options_are_checked():
    assert AgenticOptions.from_options({"max_turns": 2, "sources": ["hotpotqa"]}).sources == ("hotpotqa",)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['turns'\]"):
        AgenticOptions.from_options({"turns": 2})
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        AgenticOptions(top_k=0)
    with pytest.raises(ValueError, match="none of the 1 grpo_prompts rows is a qa prompt"):
        qa_rows([{"task": "plan"}])


INFO = "\n\n<information>Doc 1(Title: Jaws) …\n</information>\n\n"


def test_outcomes():
    gold = ["Steven Spielberg"]
    assert outcome(SEARCH_TURN + INFO + ANSWER_TURN, gold, "em") == "correct"
    assert outcome("<answer> Lucas </answer>", gold, "em") == "incorrect"
    assert outcome(SEARCH_TURN + INFO, gold, "em") == "fail"  # out of turns while searching
    assert outcome("<search> Jaws dir", gold, "em") == "fail"  # a search cut off by the budget
    assert outcome("<search> </search>", gold, "em") == "format"  # an empty query
    assert outcome(SEARCH_TURN + INFO + "<search> Jaws </search>", gold, "em") == "fail"  # cut by the budget
    assert outcome(SEARCH_TURN + INFO + "I give up.", gold, "em") == "format"
    assert outcome("<answer> It was Steven Spielberg </answer>", gold, "cover_em") == "correct"


def test_r3_process_reward_worked_by_hand():
    """Judge verdicts by passage: jaws 0.7, et 0.3, paris 0.5, and None (unreadable) for a second
    jaws search of the fourth rollout's question (q2):
    - two searches (0.7, 0.3), right answer: λ = 0.6 · (0.7 + 0.3) = 0.6
    - one search (0.5), wrong answer: λ = -0.2 · 0.5 = -0.1
    - one search (0.7), out of turns: λ = -0.1 · 0.7 = -0.07
    - searches (unreadable: 0, 0.3), no action at the end: 1 · (0 + 0.3 - 1) = -0.7
    - no search, right answer: 0.6 · 0 = 0
    """
    hit = {
        "jaws": {"passage_id": "p-jaws", "title": "Jaws", "text": "t", "score": 1.0},
        "et": {"passage_id": "p-et", "title": "E.T.", "text": "t", "score": 1.0},
        "paris": {"passage_id": "p-paris", "title": "Paris", "text": "t", "score": 1.0},
    }
    asked = []

    def judge(items):
        asked.extend((q, [h.passage_id for h in hits]) for q, hits in items)
        return [
            None
            if q == "Q2?" and hits[0].passage_id == "p-jaws"
            else {"p-jaws": 0.7, "p-et": 0.3, "p-paris": 0.5}[hits[0].passage_id]
            for q, hits in items
        ]

    reward = R3ProcessReward(judge, {"q1": "Q1?", "q2": "Q2?"}, R3Config())
    completions = [
        SEARCH_TURN + INFO + SEARCH_TURN + INFO + ANSWER_TURN,
        "<answer> Lucas </answer>",
        SEARCH_TURN + INFO,
        SEARCH_TURN + INFO + SEARCH_TURN + INFO + "I give up.",
        ANSWER_TURN,
    ]
    retrieved = [[[hit["jaws"]], [hit["et"]]], [[hit["paris"]]], [[hit["jaws"]]], [[hit["jaws"]], [hit["et"]]], []]
    scores = reward(
        prompts=[""] * 5,
        completions=completions,
        retrieved=retrieved,
        golden_answers=[["Steven Spielberg"]] * 5,
        question_id=["q1", "q1", "q1", "q2", "q1"],
    )
    assert scores == pytest.approx([0.6, -0.1, -0.07, -0.7, 0.0])
    assert asked == [
        ("Q1?", ["p-jaws"]),
        ("Q1?", ["p-et"]),
        ("Q1?", ["p-paris"]),
        ("Q1?", ["p-jaws"]),
        ("Q2?", ["p-jaws"]),
        ("Q2?", ["p-et"]),
    ]  # one batch: every search of the step
    with pytest.raises(ValueError, match="question 'q9' is not in the warehouse"):
        reward(
            prompts=[""],
            completions=[SEARCH_TURN + INFO],
            retrieved=[[[hit["jaws"]]]],
            golden_answers=[["x"]],
            question_id=["q9"],
        )


def test_one_grpo_step_through_the_rollout_hook(tiny_model, bm25, tmp_path, log):
    """A random tiny Llama writes no tags: its rollouts are one turn each, scored 0 by format, and
    the step still runs through TRL's rollout_func and logs every rollout."""
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Question: who directed film {i}?"}],
            "golden_answers": ["Steven Spielberg"],
            "question_id": f"q{i}",
            "task": "qa",
        }
        for i in range(2)
    ]
    rows.append({**rows[0], "task": "plan"})  # APEX's planner prompts are left out
    ctx = MethodContext(
        rows=rows,
        model_path=tiny_model,
        output_dir=str(tmp_path / "out"),
        save_steps=10,
        seed=0,
        logger=log,
        rewards=["answer_f1", "format"],
        options={"max_turns": 2},
        trl={"max_steps": 1, "max_completion_length": 16, "num_generations": 2, "per_device_train_batch_size": 2},
    )
    trainer = build_trainer(ctx, retriever=bm25)
    assert len(trainer.train_dataset) == 2
    metrics = run_training(trainer, ctx.output_dir)
    assert metrics["global_step"] == 1
    assert metrics["reward"] == 0.0  # no answer tag from random weights
    lines = [json.loads(line) for line in (Path(ctx.output_dir) / ROLLOUT_LOG).read_text().splitlines()]
    assert len(lines) == 2 and all(line["step"] == 0 and line["model_tokens"] <= 16 for line in lines)
    assert sum(line.startswith("grpo-agentic step 0") for line in log.lines) == 2


def test_the_engine_judge_asks_the_judge_role_once_per_search_in_one_batch():
    """Verdicts by passage title: Jaws reads 0.8, Paris does not read (None, scored 0 by r3_process)."""
    from ragfactory.tasks.llm.batcher import Batcher
    from ragfactory.tasks.retrieval.types import Hit
    from ragfactory.tasks.search.r3.training import EngineJudge
    from tests.fakes import ScriptedBackend

    def verdict(request, sample):
        assert request.role == "judge" and request.sampling.grammar is not None
        return "So the relevance is 0.8" if "(1) Jaws: text" in request.messages[-1].content else "I cannot tell."

    backend = ScriptedBackend(verdict)
    judge = EngineJudge(Batcher(backend))
    jaws, paris = (Hit(f"p-{t.lower()}", t, "text", 1.0) for t in ("Jaws", "Paris"))
    assert judge([("Who directed Jaws?", [jaws]), ("Who directed Jaws?", [paris])]) == [0.8, None]
    assert [len(batch) for batch in backend.batches] == [2]
