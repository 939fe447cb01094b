"""TreePS-RAG on the seeded world: the teacher engine writes each state's next step by the
question's gold decomposition from what the chat shows (and guesses at temperature), a tree
grown with it values searches and right answers above guesses, and the ``treeps`` evaluation
mode sends the chats its trajectories hold and, with the teacher, answers every test question."""

from __future__ import annotations

import asyncio
import json

import pyarrow as pa
import pytest

from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.registry import backend_entry
from ragfactory.tasks.llm.types import Message, Request, Sampling
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.common import hit_record
from ragfactory.tasks.search.treeps.config import TreePSConfig
from ragfactory.tasks.search.treeps.evaluation import answer_treeps
from ragfactory.tasks.search.treeps.expansion import expand_question
from ragfactory.tasks.search.treeps.steps import initial_prompt, parse_step, step_turns
from ragfactory.tasks.search.treeps.teacher import TEACHER, TreePSTeacher, read_chat
from ragfactory.tasks.search.treeps.trajectories import TrajectoryConfig, trajectory_rows
from ragfactory.tasks.valuation.node_values import estimate_node_values
from tests.fakes import (
    ScriptedBackend,
    step_mode_on_world,
    teacher_world,
    world_rows,
)

PROMPT = "treeps_step"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return teacher_world(tmp_path_factory, TreePSTeacher)


def step(teacher, turns, temperature=0.0, seed=0):
    sampling = Sampling(temperature=temperature, seed=seed, max_tokens=512)
    return teacher.generate_batch([Request(tuple(turns), sampling)])[0][0].text


def test_a_chat_reads_back_into_tag_question_and_searches():
    doc = {"passage_id": "p1", "title": "Tharo Vekin", "text": "Tharo Vekin works for Zorba Works.", "score": 1.0}
    question = "In which city is the company that Tharo Vekin works for headquartered?"
    turns = [Message("user", initial_prompt(question, PROMPT))]
    assert read_chat(turns) == ("reason", question, [])
    turns += step_turns("<reason>Who?</reason>\n<search>Tharo Vekin</search>", [doc])
    assert read_chat(turns) == ("reason", question, [("Tharo Vekin", [Hit("", doc["title"], doc["text"], 0.0)])])
    think = [Message("user", initial_prompt(question, "treeps_search_r1"))]
    assert read_chat(think)[0] == "think"


def test_the_teacher_walks_a_bridge_one_search_a_hop_then_answers(world):
    out, teacher, retriever = world
    row = next(r for r in world_rows(out, "train") if r["rung"] == "bridge")
    first, second = (s["question"] for s in row["question_decomposition"])
    turns = [Message("user", initial_prompt(row["question"], PROMPT))]
    for hop in (first, None):
        text = step(teacher, turns)
        parsed = parse_step(text, PROMPT)
        assert (parsed.error, parsed.get("action"), text[:10]) == (None, "search", "<reason>I ")
        if hop is not None:
            assert parsed.get("query") == hop
        else:  # the second hop's #1 is what the first search's documents said
            assert "#1" in second and parsed.get("query") == second.replace(
                "#1", row["question_decomposition"][0]["answer"]
            )
        [hits] = retriever.search([parsed.get("query")], 3)
        turns += step_turns(text, [hit_record(h) for h in hits])
    final = parse_step(step(teacher, turns), PROMPT)
    assert (final.get("action"), final.get("answer")) == ("answer", row["answer"])


def test_at_temperature_one_every_step_is_a_guess_from_its_first_token(world):
    out, teacher, _ = world
    row = next(r for r in world_rows(out, "train") if r["rung"] == "lookup")
    turns = [Message("user", initial_prompt(row["question"], PROMPT))]
    for seed in range(8):
        text = step(teacher, turns, temperature=1.0, seed=seed)
        parsed = parse_step(text, PROMPT)
        assert text.startswith("<reason>It ") and parsed.get("action") == "answer"
        assert parsed.get("answer") != row["answer"]


def test_the_engine_is_registered_and_refuses_other_chats(world):
    out, teacher, _ = world

    class Role:
        options = {"world": str(out)}

    made = backend_entry(TEACHER).factory(Role, None)
    assert isinstance(made, TreePSTeacher) and made.fingerprint.startswith("world-teacher/treeps/v1/")
    with pytest.raises(ValueError, match="TreePS-RAG step chats only"):
        teacher.generate_batch([Request((Message("user", "Who directed Jaws?"),))])
    with pytest.raises(ValueError, match="has no question"):
        teacher.generate_batch([Request((Message("user", initial_prompt("Who directed Jaws?", PROMPT)),))])


@pytest.fixture(scope="module")
def built(world):
    """Two lookups and two bridges of the world's train split, grown with the teacher at the
    learning benchmark's temperature and valued as the build's valuation stage values them."""
    out, teacher, retriever = world
    rows = [r for r in world_rows(out, "train") if r["rung"] == "lookup"][:2]
    rows += [r for r in world_rows(out, "train") if r["rung"] == "bridge"][:2]
    questions = [{"question_id": r["id"], "question": r["question"], "golden_answers": [r["answer"]]} for r in rows]
    batcher, config = Batcher(teacher), TreePSConfig(temperature=0.5)

    async def main():
        jobs = [lambda q=q: expand_question(q, batcher, retriever, config, "run", 7) for q in questions]
        return await batcher.run_all(jobs, max_in_flight=4)

    nodes = [n for tree in asyncio.run(main()) for n in tree.node_rows()]
    return rows, questions, estimate_node_values(pa.Table.from_pylist(nodes)).to_pylist()


def test_searches_and_right_answers_get_positive_advantages_and_guesses_negative(built):
    rows, _, nodes = built
    gold = {r["id"]: r["answer"] for r in rows}
    steps = [n for n in nodes if n["kind"] != "question"]
    assert steps and not any(n["is_format_error"] for n in steps)
    answers = [(n, json.loads(n["parsed"])["answer"]) for n in steps if n["kind"] == "answer"]
    right = [n for n, answer in answers if answer == gold[n["question_id"]]]
    guesses = [n for n, answer in answers if answer != gold[n["question_id"]]]
    searches = [n for n in steps if n["kind"] == "sub_query" and n["visits"]]
    assert right and guesses and searches
    assert all(n["text"].startswith("<reason>I found") and n["advantage"] > 0 for n in right)
    assert all(n["text"].startswith("<reason>It ") and n["advantage"] <= 0 for n in guesses)
    assert sum(n["advantage"] for n in searches) / len(searches) > 0
    assert all(n["text"].startswith("<reason>I need") for n in searches)


def test_the_treeps_mode_sends_the_chats_a_right_trajectory_holds(built, world):
    """Replaying a right trajectory's steps, the mode sends exactly its chat's prefixes, in order,
    and ends with its answer."""
    _, _, retriever = world
    rows, questions, nodes = built
    trajectories = trajectory_rows(nodes, TrajectoryConfig(n_samples=None))
    for row, question in zip(rows, questions):
        [path] = [t for t in trajectories if t["question_id"] == row["id"] and t["reward"] == 1.0][:1]
        chat = [Message(m["role"], m["content"]) for m in path["messages"]]
        replies = {tuple(chat[:i]): chat[i].content for i in range(1, len(chat)) if chat[i].role == "assistant"}
        backend = ScriptedBackend(lambda request, i, replies=replies: replies[tuple(request.messages)])
        asked = EvalQuestion(question["question_id"], question["question"], (row["answer"],))
        outcome = asyncio.run(answer_treeps(asked, Batcher(backend), retriever, InferenceConfig(max_rounds=4)))
        sent = [tuple(request.messages) for batch in backend.batches for request in batch]
        assert sent == list(replies)
        assert (outcome.prediction, outcome.n_retrievals, outcome.errors) == (row["answer"], len(sent) - 1, [])


def test_the_treeps_mode_with_the_teacher_answers_every_test_question(world):
    out, teacher, retriever = world
    # one search a hop, then the answer; a chain cut at 2 steps ends with none
    step_mode_on_world(answer_treeps, teacher, retriever, out, InferenceConfig(max_rounds=4, max_tokens=64))
