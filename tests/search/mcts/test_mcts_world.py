"""ReasonRAG on the seeded world: the teacher engine writes each question's gold decomposition as
Reasoning and Grounding steps from what the prompt shows (and errs at temperature), and the
``agentic`` evaluation mode with it answers every test question."""

from __future__ import annotations

import pytest

from ragfactory.tasks.eval.inference import InferenceConfig
from ragfactory.tasks.llm.types import Message, Request, Sampling
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.mcts.evaluation import answer_agentic
from ragfactory.tasks.search.mcts.steps import closed, grounding_input, parse_turn, reasoning_input
from ragfactory.tasks.search.mcts.teacher import MctsTeacher, read_prompt
from tests.fakes import teacher_world, world_rows, world_test_outcomes


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return teacher_world(tmp_path_factory, MctsTeacher)


def ask(teacher, user, temperature=0.0, seed=0):
    request = Request((Message("user", user),), Sampling(temperature=temperature, seed=seed))
    text = teacher.generate_batch([request])[0][0].text
    return text, parse_turn(text).fields


def test_the_prompt_reads_back_into_question_thoughts_and_documents():
    doc = Hit("p1", "Tharo Vekin", "Tharo Vekin works for Zorba Works.", 1.0)
    thoughts = ["So the next query is <query>Tharo Vekin</query>"]
    assert read_prompt(reasoning_input("Who is Tharo Vekin?", [])) == ("Who is Tharo Vekin?", [], None)
    assert read_prompt(grounding_input("Who is Tharo Vekin?", thoughts, [doc, doc])) == (
        "Who is Tharo Vekin?",
        [("query", "Tharo Vekin")],
        [("Tharo Vekin", "Tharo Vekin works for Zorba Works.")] * 2,
    )


def test_the_teacher_walks_a_chain_query_evidence_answer(world):
    out, teacher, retriever = world
    row = next(r for r in world_rows(out, "train") if r["rung"] == "chain")
    gold, thoughts = row["question_decomposition"], []
    for k, step in enumerate(gold):
        text, turn = ask(teacher, reasoning_input(row["question"], thoughts))
        expected = step["question"].replace(f"#{k}", gold[k - 1]["answer"]) if k else step["question"]
        assert turn == {"action": "query", "content": expected}
        thoughts.append(closed(text, "query"))
        [hits] = retriever.search([expected], 3)
        text, turn = ask(teacher, grounding_input(row["question"], thoughts, hits))
        # the evidence is the sentence that states the hop's answer
        assert turn["action"] == "evidence" and step["answer"] in turn["content"]
        thoughts.append(closed(text, "evidence"))
    assert ask(teacher, reasoning_input(row["question"], thoughts))[1] == {"action": "answer", "content": row["answer"]}
    # at temperature 1 every sample errs: an answer at once, or evidence with another object
    first = ask(teacher, reasoning_input(row["question"], []), temperature=1.0)[1]
    assert first["action"] == "answer" and first["content"] != row["answer"]
    [hits] = retriever.search([gold[0]["question"]], 3)
    grounded = grounding_input(row["question"], thoughts[:1], hits)
    assert ask(teacher, grounded, temperature=1.0)[1]["content"] != ask(teacher, grounded)[1]["content"]
    # documents that miss the fact give no evidence, and no right answer after it
    blind = ask(teacher, grounding_input(row["question"], thoughts[:1], []))
    assert blind[1] == {"action": "evidence", "content": "None"}
    after = ask(teacher, reasoning_input(row["question"], [thoughts[0], closed(blind[0], "evidence")]))[1]
    assert after["action"] == "answer" and after["content"] != row["answer"]


def test_the_teacher_refuses_a_prompt_that_is_not_a_reasonrag_step(world):
    _, teacher, _ = world
    with pytest.raises(ValueError, match="ReasonRAG step prompts only"):
        teacher.generate_batch([Request((Message("user", "Who directed Jaws?"),))])
    with pytest.raises(ValueError, match="has no question"):
        teacher.generate_batch([Request((Message("user", reasoning_input("Who directed Jaws?", [])),))])


def test_the_agentic_mode_with_the_teacher_answers_every_test_question(world):
    out, teacher, retriever = world
    done = world_test_outcomes(answer_agentic, teacher, retriever, InferenceConfig(max_rounds=7, max_tokens=64), out)
    assert [o.prediction for _, o in done] == [r["answer"] for r, _ in done]
    # a query and its evidence per hop, then the answer
    assert [o.n_retrievals for _, o in done] == [len(r["question_decomposition"]) for r, _ in done]
    assert all(o.n_steps == 2 * o.n_retrievals + 1 and not o.errors for _, o in done)
