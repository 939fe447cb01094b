"""R3 on the seeded world: the teacher engine writes each question's gold decomposition as R3 steps
from the documents in the prompt (and errs at temperature), a build with it keeps right attempts
only, and the ``r3`` evaluation mode runs R3's step loop (the teacher answers every test question)."""

from __future__ import annotations

import pytest

from ragfactory.tasks.data.world.oracle import subject_of
from ragfactory.tasks.eval.inference import InferenceConfig
from ragfactory.tasks.llm.types import Message, Request, Sampling
from ragfactory.tasks.prompts.loader import load_grammar
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.r3.evaluation import MODES, answer_r3
from ragfactory.tasks.search.r3.steps import Step, parse_step, step_prompt
from ragfactory.tasks.search.r3.teacher import WorldTeacher, read_prompt
from tests.fakes import step_mode_on_world, teacher_world, world_rows


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return teacher_world(tmp_path_factory, WorldTeacher)


def ask(teacher, question, steps, temperature=0.0, seed=0, grammar=None):
    sampling = Sampling(temperature=temperature, seed=seed, grammar=grammar and load_grammar(grammar, 96))
    request = Request((Message("user", step_prompt(question, steps, 512)),), sampling)
    return parse_step(teacher.generate_batch([request])[0][0].text)


def test_the_prompt_reads_back_into_question_queries_and_documents():
    doc = Hit("p1", "Tharo Vekin", "Tharo Vekin works for Zorba Works.", 1.0)
    prompt = step_prompt(
        "Which company does Tharo Vekin work for?", [Step("first", query="Tharo Vekin", docs=(doc,))], 512
    )
    question, steps = read_prompt(prompt)
    assert question == "Which company does Tharo Vekin work for?"
    assert [(q, [(d.title, d.text) for d in docs]) for q, docs in steps] == [
        ("Tharo Vekin", [("Tharo Vekin", "Tharo Vekin works for Zorba Works.")])
    ]


def test_the_teacher_walks_a_chain_through_the_documents_it_is_shown(world):
    out, teacher, retriever = world
    row = next(r for r in world_rows(out, "train") if r["rung"] == "chain")
    gold, steps = row["question_decomposition"], []
    for k, step in enumerate(gold):
        turn = ask(teacher, row["question"], steps)
        # the k-th sub-question, its #n replaced by the answer the documents gave
        expected = step["question"].replace(f"#{k}", gold[k - 1]["answer"]) if k else step["question"]
        assert turn.fields["action"] == "query" and turn.fields["content"] == expected
        [hits] = retriever.search([turn.fields["content"]], 3)
        steps.append(Step(turn.fields["analysis"], query=turn.fields["content"], docs=tuple(hits)))
    final = ask(teacher, row["question"], steps)
    assert final.fields == {**final.fields, "action": "answer", "content": row["answer"]}
    # at temperature 1 every sample errs: a name no passage holds
    wrong = ask(teacher, row["question"], steps, temperature=1.0)
    assert wrong.fields["action"] == "answer" and wrong.fields["content"] != row["answer"]
    # documents that miss the fact leave it without a right answer
    blind = [Step(s.analysis, query=s.query, docs=()) for s in steps]
    assert ask(teacher, row["question"], blind[:1]).fields["action"] == "answer"
    assert ask(teacher, row["question"], blind[:1]).fields["content"] != row["answer"]


def test_a_query_sample_errs_at_temperature_as_the_embedded_model_does(world):
    out, teacher, retriever = world
    row = next(r for r in world_rows(out, "train") if r["rung"] == "bridge")
    first = row["question_decomposition"][0]["question"]
    # held to a query at temperature 1, it asks about another entity: the subject swapped out
    drifted = ask(teacher, row["question"], [], temperature=1.0, grammar="r3_query").fields
    subject = subject_of(first)
    assert drifted["action"] == "query" and subject not in drifted["content"]
    before, after = first.split(subject)
    content = drifted["content"]
    assert content.startswith(before) and content.endswith(after)
    other = content[len(before) : len(content) - len(after)]
    assert other and other not in (out / "corpus.jsonl").read_text()  # a name no passage holds
    # its documents state nothing about the entity the question names: the attempt ends wrong
    [hits] = retriever.search([drifted["content"]], 3)
    blind = [Step(drifted["analysis"], query=drifted["content"], docs=tuple(hits))]
    final = ask(teacher, row["question"], blind).fields
    assert final["action"] == "answer" and final["content"] != row["answer"]
    # free to answer at temperature 1, a query step answers at once with a guess
    guess = ask(teacher, row["question"], [], temperature=1.0).fields
    assert guess["action"] == "answer" and guess["content"] != row["answer"]
    # greedy, the same prompt gets the gold sub-question, whatever the grammar
    for grammar in (None, "r3_query"):
        assert ask(teacher, row["question"], [], grammar=grammar).fields["content"] == first


def test_the_teacher_refuses_a_prompt_that_is_not_an_r3_step(world):
    _, teacher, _ = world
    with pytest.raises(ValueError, match="R3 step prompts only"):
        teacher.generate_batch([Request((Message("user", "Who directed Jaws?"),))])
    with pytest.raises(ValueError, match="has no question"):
        teacher.generate_batch([Request((Message("user", step_prompt("Who directed Jaws?", [], 512)),))])


def test_the_r3_mode_runs_the_step_loop_the_teacher_answers_every_test_question(world):
    out, teacher, retriever = world
    assert MODES == {"r3": answer_r3}
    # one retrieval and one step per hop, then the answering step; a chain cut at 2 steps: none
    step_mode_on_world(answer_r3, teacher, retriever, out, InferenceConfig(max_rounds=5, max_tokens=96))
