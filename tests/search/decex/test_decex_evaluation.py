"""DecEx-RAG's step loop as the ``decex`` evaluation mode, with a scripted model: a lookup in two
turns, a bridge in three, each prompt the one an SFT row of that state holds."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig, check_max_tokens, mode_grammars
from ragfactory.tasks.eval.runner import eval_modes
from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.common import hit_record
from ragfactory.tasks.search.decex.evaluation import answer_decex, written_steps
from ragfactory.tasks.search.decex.exports import sft_examples
from ragfactory.tasks.search.decex.history import Step, render_final, render_step, rollout_prompt
from ragfactory.tasks.search.parsing import ROLLOUT_STOP
from ragfactory.tasks.search.tree import QuestionTree
from tests.fakes import FixedRetriever, ScriptedBackend

CONFIG = InferenceConfig(max_rounds=5, max_tokens=96)
LOOKUP = EvalQuestion("q-lookup", "In which city was Tharo Vekin born?", ("Drelmere",))
BRIDGE = EvalQuestion("q-bridge", "In which country was Tharo Vekin born?", ("Velmoria",))
BORN, LOCATED = "In which city was Tharo Vekin born?", "In which country is Drelmere located?"
THARO = Hit("p-tharo", "Tharo Vekin", "Tharo Vekin is a native of Drelmere.", 2.0)
DRELMERE = Hit("p-drel", "Drelmere", "The city of Drelmere lies in Velmoria.", 2.0)
OTHER = Hit("p-other", "Zorba Works", "Zorba Works was founded in 1901.", 1.0)
RETRIEVAL = {BORN: [THARO, OTHER], LOCATED: [DRELMERE, OTHER]}
FIRST = Step("The question needs this fact first.", BORN, query=BORN, documents=(THARO, OTHER))
SECOND = Step("Tharo Vekin was born in Drelmere.", LOCATED, query=LOCATED, documents=(DRELMERE, OTHER))


def step_text(index: int, step: Step) -> str:
    """A searching step as the SFT rows write it, cut at the stop string as an engine cuts it."""
    return render_step(index, step, with_documents=False).removesuffix("</search>")


def run(replies, question, config=CONFIG):
    """The mode on one question, the model's turns given in order; (outcome, prompts, retriever)."""
    turns = iter(replies)
    backend = ScriptedBackend(lambda request, i: next(turns))
    retriever = FixedRetriever(RETRIEVAL)
    outcome = asyncio.run(answer_decex(question, Batcher(backend), retriever, config))
    requests = [request for batch in backend.batches for request in batch]
    assert all(r.sampling.stop == ROLLOUT_STOP and r.sampling.grammar.name == "decex_rollout" for r in requests)
    assert all(len(r.messages) == 1 and r.messages[0].role == "user" for r in requests)
    return outcome, [r.messages[0].content for r in requests], retriever


def test_the_mode_is_declared_with_the_grammar_that_holds_its_turns():
    assert eval_modes()["decex"] is answer_decex
    assert mode_grammars()["decex"] == ("decex_rollout",)
    check_max_tokens(["decex"], CONFIG.max_tokens)


def test_a_lookup_takes_a_search_and_an_answer():
    final = render_final("So the answer is Drelmere.", "Drelmere")
    outcome, prompts, retriever = run([step_text(1, FIRST), final], LOOKUP)
    assert (outcome.prediction, outcome.n_steps, outcome.n_retrievals, outcome.errors) == ("Drelmere", 2, 1, [])
    assert retriever.batches == [[BORN]]
    assert prompts == [rollout_prompt(LOOKUP.question, []), rollout_prompt(LOOKUP.question, [FIRST])]


def test_a_bridge_takes_two_searches_and_an_answer():
    final = render_final("So the answer is Velmoria.", "Velmoria")
    outcome, prompts, retriever = run([step_text(1, FIRST), step_text(2, SECOND), final], BRIDGE)
    assert (outcome.prediction, outcome.n_steps, outcome.n_retrievals, outcome.errors) == ("Velmoria", 3, 2, [])
    assert retriever.batches == [[BORN], [LOCATED]]
    assert prompts == [rollout_prompt(BRIDGE.question, steps) for steps in ([], [FIRST], [FIRST, SECOND])]
    # the second step as the model wrote it, its search closed again and its documents after it
    assert (
        f"Step 2:\nTharo Vekin was born in Drelmere.\nSub-question: {LOCATED}\n<search> {LOCATED} </search>\n"
        '<information>\nDoc 1: "Drelmere"\nThe city of Drelmere lies in Velmoria.\nDoc 2:'
    ) in prompts[2]


def test_steps_answered_from_memory_join_the_history_before_the_search():
    memory = Step("", BORN, answer="Drelmere")
    text = render_step(1, memory) + "\n\n" + step_text(2, replace(SECOND, reasoning="Then the country."))
    assert written_steps(text, LOCATED, [DRELMERE]) == [
        memory,
        Step("Then the country.", LOCATED, query=LOCATED, documents=(DRELMERE,)),
    ]
    # a search without the step's lines: its query stands for the sub-question
    assert written_steps("I need  the city. <search> x", "x", []) == [Step("I need the city.", "x", query="x")]


def test_a_turn_with_neither_tag_ends_the_loop_and_max_rounds_bounds_it():
    outcome, prompts, retriever = run(["I am not sure."], LOOKUP)
    assert (outcome.prediction, outcome.errors, len(prompts)) == ("", ["step 1: missing <search> or <answer>"], 1)
    outcome, prompts, retriever = run([step_text(1, FIRST)] * 2, LOOKUP, replace(CONFIG, max_rounds=2))
    assert (outcome.prediction, outcome.n_retrievals) == ("", 2)
    assert outcome.errors == ["no final answer in 2 steps"]


def chain_rows() -> list[dict]:
    """A kept DecEx chain for the bridge: a search a hop (its documents in ``parsed.hits``), then
    the answer."""
    tree = QuestionTree("r", BRIDGE.question_id, "decex")
    node = tree.add_root(BRIDGE.question)
    for i, step in enumerate((FIRST, SECOND)):
        sub = {"reasoning": step.reasoning, "question": step.question}
        node = tree.add_child(node, f"s{i}", "sub_question", parsed=sub, value=1.0, is_selected=True)
        hits = [hit_record(h) for h in step.documents]
        node = tree.add_child(node, "e0", "sub_query", parsed={"query": step.query, "hits": hits}, value=1.0)
        node.is_selected = True
    answer = {"reasoning": "So the answer is Velmoria.", "answer": "Velmoria"}
    tree.add_child(node, "a0", "answer", parsed=answer, value=1.0, reward=1.0, is_leaf=True, is_selected=True)
    return tree.node_rows()


def test_the_mode_asks_what_the_sft_rows_of_a_chain_hold_byte_for_byte():
    rows = sft_examples(chain_rows(), [{"question_id": BRIDGE.question_id, "question": BRIDGE.question}])
    assert len(rows) == 3
    outputs = {row["messages"][0]["content"]: row["messages"][1]["content"] for row in rows}
    backend = ScriptedBackend(lambda request, i: outputs[request.messages[0].content])
    outcome = asyncio.run(answer_decex(BRIDGE, Batcher(backend), FixedRetriever(RETRIEVAL), CONFIG))
    sent = [request.messages[0].content for batch in backend.batches for request in batch]
    assert sent == [row["messages"][0]["content"] for row in rows]
    assert (outcome.prediction, outcome.n_retrievals, outcome.errors) == ("Velmoria", 2, [])
