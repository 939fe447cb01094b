"""DecEx-RAG on the seeded world: the teacher engine answers every DecEx prompt by the question's
gold decomposition from what the prompt shows (and errs at temperature), a search with it keeps a
right chain for every question and exports SFT rows and preference pairs, and the ``decex``
evaluation mode with it answers every test question."""

from __future__ import annotations

import asyncio

import pytest

from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.data.world import build_config
from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.registry import backend_entry
from ragfactory.tasks.llm.types import Message, Request, Sampling
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.decex import history
from ragfactory.tasks.search.decex.config import TERMINATION, DecExConfig, grammar
from ragfactory.tasks.search.decex.evaluation import answer_decex
from ragfactory.tasks.search.decex.expansion import expand_question
from ragfactory.tasks.search.decex.exports import best_chain, preference_pairs, sft_examples
from ragfactory.tasks.search.decex.history import Step, render_final, render_information, render_step
from ragfactory.tasks.search.decex.steps import (
    parse_self_answer,
    parse_sub_query,
    parse_sub_question,
    parse_termination,
)
from ragfactory.tasks.search.decex.teacher import TEACHER, DecExTeacher, Hop, read_hops, read_prompt
from ragfactory.tasks.search.parsing import parse_rollout_turn
from ragfactory.tasks.search.tree import group_trees
from tests.fakes import (
    ScriptedBackend,
    step_mode_on_world,
    teacher_world,
    world_rows,
)

# benchmarks/learning.py's DecEx settings: the teacher errs on half its samples; five termination
# votes leave a state's votes without a right answer once in 32
SETTINGS = {"temperature": 0.5, "termination_samples": 5, "metric": "em"}
FIRST = "The question needs this fact first."


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return teacher_world(tmp_path_factory, DecExTeacher)


def ask(teacher, prompt, temperature=0.0, seed=0, turns=(), held=None):
    messages = (Message("user", prompt), *turns)
    sampling = Sampling(temperature=temperature, seed=seed, max_tokens=512, grammar=held)
    return teacher.generate_batch([Request(messages, sampling)])[0][0].text


def first_row(out, rung, split="train"):
    return next(r for r in world_rows(out, split) if r["rung"] == rung)


def searched(retriever, reasoning, query):
    [hits] = retriever.search([query], 3)
    return Step(reasoning, query, query=query, documents=tuple(hits))


def test_the_prompts_read_back_into_kind_question_and_history():
    doc = Hit("p1", "Tharo Vekin", "Tharo Vekin works for Zorba Works.", 1.0)
    steps = [Step("Think.", "Which company does Tharo Vekin work for?", query="Tharo Vekin", documents=(doc,))]
    question = "In which city is the company that Tharo Vekin works for headquartered?"
    rendered = history.render_history(steps)
    assert read_prompt(history.termination_prompt(question, [])) == ("decex_termination", question, "")
    assert read_prompt(history.termination_prompt(question, steps)) == ("decex_termination", question, rendered)
    assert read_prompt(history.sub_question_prompt(question, steps)) == ("decex_sub_question", question, rendered)
    assert read_prompt(history.rollout_prompt(question, steps)) == ("decex_rollout", question, rendered)
    assert read_prompt(history.self_answer_prompt("Who?")) == ("decex_self_answer", "Who?", "")
    assert read_prompt(history.sub_query_prompt("Who?")) == ("decex_sub_query", "Who?", "")
    # a searched step, a self-answered one, and an open one
    more = [*steps, Step("", "In which city is Zorba Works headquartered?", answer="Drelmere"), Step("", "Why?")]
    assert read_hops(history.render_history(more)) == [
        Hop("Which company does Tharo Vekin work for?", None, "Tharo Vekin", (Hit("", doc.title, doc.text, 0.0),)),
        Hop("In which city is Zorba Works headquartered?", "Drelmere"),
        Hop("Why?"),
    ]


def test_the_teacher_walks_a_bridge_through_every_decex_prompt(world):
    out, teacher, retriever = world
    row = first_row(out, "bridge")
    gold, question, answer = row["question_decomposition"], row["question"], row["answer"]
    one, two = gold[0]["question"], gold[1]["question"].replace("#1", gold[0]["answer"])
    assert parse_termination(ask(teacher, history.termination_prompt(question, []))).fields["question"] == one
    assert parse_sub_question(ask(teacher, history.sub_question_prompt(question, []))).fields == {
        "reasoning": FIRST,
        "question": one,
    }
    assert parse_sub_query(ask(teacher, history.sub_query_prompt(one))).fields == {"query": one}
    guessed = parse_self_answer(ask(teacher, history.self_answer_prompt(one)))
    assert guessed.error is None and guessed.fields["answer"] != gold[0]["answer"]
    assert ask(teacher, history.rollout_prompt(question, [])) == render_step(
        1, Step(FIRST, one, query=one), with_documents=False
    )
    steps = [searched(retriever, FIRST, one)]
    found = f"The sub-questions so far found {gold[0]['answer']}; the question needs this fact next."
    decision = parse_termination(ask(teacher, history.termination_prompt(question, steps))).fields
    assert (decision["decision"], decision["question"]) == ("continue", two)
    assert parse_sub_question(ask(teacher, history.sub_question_prompt(question, steps))).fields["question"] == two
    assert ask(teacher, history.rollout_prompt(question, steps)) == render_step(
        2, Step(found, two, query=two), with_documents=False
    )
    steps.append(searched(retriever, found, two))
    decision = parse_termination(ask(teacher, history.termination_prompt(question, steps))).fields
    assert (decision["decision"], decision["answer"]) == ("terminate", answer)
    reasoning = f"So the answer is {answer}: the sub-questions found {gold[0]['answer']} and {answer}."
    assert decision["reasoning"] == reasoning
    assert ask(teacher, history.rollout_prompt(question, steps)) == render_final(reasoning, answer)


def test_a_rollout_searches_an_open_sub_question_then_reads_its_own_turns(world):
    out, teacher, retriever = world
    row = first_row(out, "bridge")
    gold, question, answer = row["question_decomposition"], row["question"], row["answer"]
    one, two = gold[0]["question"], gold[1]["question"].replace("#1", gold[0]["answer"])
    prompt = history.rollout_prompt(question, [Step(FIRST, one)])  # a sub-question branch's state
    turns = [Message("assistant", ask(teacher, prompt))]
    assert turns[0].content == f"<search> {one} </search>"
    turns.append(Message("user", render_information(retriever.search([one], 3)[0])))
    turns.append(Message("assistant", ask(teacher, prompt, turns=turns)))
    assert parse_rollout_turn(turns[-1].content).fields["query"] == two
    assert turns[-1].content.startswith("Step 2:\n")
    turns.append(Message("user", render_information(retriever.search([two], 3)[0])))
    assert parse_rollout_turn(ask(teacher, prompt, turns=turns)).fields["answer"] == answer


def test_at_temperature_one_every_final_answer_errs_from_its_first_token(world):
    out, teacher, retriever = world
    row = first_row(out, "lookup")
    question, answer, one = row["question"], row["answer"], row["question_decomposition"][0]["question"]
    steps = [searched(retriever, FIRST, one)]
    right = ask(teacher, history.rollout_prompt(question, steps))
    assert right.startswith("So the answer is") and parse_rollout_turn(right).fields["answer"] == answer
    for seed in range(8):
        wrong = ask(teacher, history.rollout_prompt(question, steps), temperature=1.0, seed=seed)
        assert parse_rollout_turn(wrong).fields["answer"] != answer
        assert wrong.split()[0] != right.split()[0] == "So"
        vote = parse_termination(ask(teacher, history.termination_prompt(question, steps), 1.0, seed)).fields
        # the exports write a final answer as its reasoning, then the tag (``render_final``)
        assert vote["decision"] == "terminate" and vote["answer"] != answer
        assert vote["reasoning"].split()[0] == "The"
    # it never knows an invented fact: every self-answer is a guess, greedy or not
    guesses = {
        parse_self_answer(ask(teacher, history.self_answer_prompt(one), t, s)).fields["answer"]
        for t, s in ((0, 0), (0, 1), (1, 2))
    }
    assert answer not in guesses and len(guesses) == 3


def test_documents_that_miss_the_fact_leave_only_a_guess(world):
    out, teacher, _ = world
    row = first_row(out, "bridge")
    question, answer, one = row["question"], row["answer"], row["question_decomposition"][0]["question"]
    blind = [Step(FIRST, one, query=one)]  # a search that found nothing
    vote = parse_termination(ask(teacher, history.termination_prompt(question, blind))).fields
    assert vote["decision"] == "terminate" and vote["answer"] != answer
    turn = parse_rollout_turn(ask(teacher, history.rollout_prompt(question, blind))).fields
    assert turn["action"] == "answer" and turn["answer"] != answer
    # the closing vote, held to an answer before the sub-questions are done, guesses too
    held = grammar(TERMINATION, 512, outcome="answer")
    vote = parse_termination(ask(teacher, history.termination_prompt(question, []), held=held)).fields
    assert vote["decision"] == "terminate" and vote["answer"] != answer


def test_a_build_config_of_the_learning_benchmark_shape_names_the_teacher_and_its_settings(world):
    out, _, _ = world
    config = build_config(out) | {
        "llm": {"policy": {"backend": TEACHER, "options": {"world": str(out)}}},
        "search": {"strategies": ["decex"], "questions_per_dataset": 4, "shard_size": 50, "decex": SETTINGS},
    }
    parsed = BuildConfig.model_validate(config)
    assert parsed.search.decex == DecExConfig(**SETTINGS)
    # the registered engine, built from the role as a build builds it
    teacher = backend_entry(TEACHER).factory(parsed.llm.policy, None)
    assert isinstance(teacher, DecExTeacher) and teacher.fingerprint.startswith("world-teacher/decex/v1/")


def test_the_teacher_refuses_a_prompt_that_is_not_a_decex_prompt(world):
    _, teacher, _ = world
    with pytest.raises(ValueError, match="DecEx-RAG prompts only"):
        teacher.generate_batch([Request((Message("user", "Who directed Jaws?"),))])
    with pytest.raises(ValueError, match="has no question"):
        teacher.generate_batch([Request((Message("user", history.termination_prompt("Who directed Jaws?", [])),))])


@pytest.fixture(scope="module")
def built(world):
    """Two lookups and two bridges of the world's train split, searched with the teacher."""
    out, teacher, retriever = world
    rows = [r for r in world_rows(out, "train") if r["rung"] == "lookup"][:2]
    rows += [r for r in world_rows(out, "train") if r["rung"] == "bridge"][:2]
    questions = [{"question_id": r["id"], "question": r["question"], "golden_answers": [r["answer"]]} for r in rows]
    batcher, config = Batcher(teacher), DecExConfig(**SETTINGS)

    async def main():
        jobs = [lambda q=q: expand_question(q, batcher, retriever, config, "run", 7) for q in questions]
        return await batcher.run_all(jobs, max_in_flight=4)

    nodes = [n for tree in asyncio.run(main()) for n in tree.node_rows()]
    return rows, questions, nodes


def test_a_teacher_search_keeps_a_right_chain_and_exports_every_step(built):
    rows, questions, nodes = built
    assert not any(n["is_format_error"] for n in nodes)
    # a guess never scores, so every retrieval decision searches: one sub-question and one
    # sub-query a hop, then the answer
    trees = {tree.question_id: tree for tree in group_trees(nodes).values()}
    for row in rows:
        chain = best_chain(trees[row["id"]])
        hops = len(row["question_decomposition"])
        assert [n["kind"] for n in chain] == ["question", *["sub_question", "sub_query"] * hops, "answer"]
        assert (chain[-1]["parsed"]["answer"], chain[-1]["value"]) == (row["answer"], 1.0)
    assert {n["value"] for n in nodes if n["kind"] == "self_answer"} == {0.0}
    # the k = 3 samples of a sub-question or sub-query are one text: the first valued, two repeats
    for kind in ("sub_question", "sub_query"):
        repeats = [n for n in nodes if n["kind"] == kind and "duplicate_of" in n["parsed"]]
        assert len(repeats) == 2 * sum(n["kind"] == kind and "duplicate_of" not in n["parsed"] for n in nodes)
    sft = sft_examples(nodes, questions)
    per_question = {q["question_id"]: sum(r["question_id"] == q["question_id"] for r in sft) for q in questions}
    assert list(per_question.values()) == [2, 2, 3, 3]  # each hop's search, then the answer
    for example in sft:
        assert parse_rollout_turn(example["messages"][1]["content"]).error is None


def test_the_pairs_prefer_searching_to_guessing_and_the_right_answer_to_a_wrong_one(built):
    rows, questions, nodes = built
    pairs = preference_pairs(nodes, questions)
    gold = {r["id"]: r["answer"] for r in rows}
    assert {p["decision"] for p in pairs} == {"decision", "execution"}
    for pair in pairs:
        chosen, rejected = pair["chosen"][0]["content"], pair["rejected"][0]["content"]
        assert pair["chosen_value"] > pair["rejected_value"]
        if pair["decision"] == "decision":  # the same sub-question, searched against guessed
            assert chosen.endswith("</search>") and "\nAnswer: " in rejected
            assert chosen.partition("<search>")[0] == rejected.partition("Answer: ")[0]
        else:  # the right final answer against a wrong one, from their first token on
            assert parse_rollout_turn(chosen).fields["answer"] == gold[pair["question_id"]]
            assert parse_rollout_turn(rejected).fields["answer"] != gold[pair["question_id"]]
            assert (chosen.split()[0], rejected.split()[0]) == ("So", "The")


def test_the_decex_mode_sends_the_prompts_the_sft_rows_hold(built, world):
    """Replaying each kept chain's SFT outputs, the mode asks exactly the rows' prompts, in order,
    and ends with the chain's answer."""
    _, _, retriever = world
    rows, questions, nodes = built
    sft = sft_examples(nodes, questions)
    for row, question in zip(rows, questions):
        examples = [r["messages"] for r in sft if r["question_id"] == question["question_id"]]
        outputs = {user["content"]: assistant["content"] for user, assistant in examples}
        backend = ScriptedBackend(lambda request, i, outputs=outputs: outputs[request.messages[-1].content])
        asked = EvalQuestion(question["question_id"], question["question"], (row["answer"],))
        outcome = asyncio.run(answer_decex(asked, Batcher(backend), retriever, InferenceConfig(max_rounds=5)))
        sent = [request.messages[-1].content for batch in backend.batches for request in batch]
        assert sent == [user["content"] for user, _ in examples]
        assert (outcome.prediction, outcome.n_retrievals, outcome.errors) == (row["answer"], len(examples) - 1, [])


def test_the_decex_mode_with_the_teacher_answers_every_test_question(world):
    out, teacher, retriever = world
    # one search a hop, then the answer; a chain cut at 2 turns ends with none
    step_mode_on_world(answer_decex, teacher, retriever, out, InferenceConfig(max_rounds=5, max_tokens=96))
