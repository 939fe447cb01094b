"""Plan parsing, gold plans and their rewrite, reference resolution, decisions and prompts (APEX-Searcher)."""

from __future__ import annotations

import doctest
import json

import pytest

from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.search.apex import execute as apex_execute
from ragfactory.tasks.search.apex import plan_format, plan_rewrite
from ragfactory.tasks.search.apex.execute import confidence, parse_decision, resolve_references
from ragfactory.tasks.search.apex.plan_format import gold_plan_texts, parse_plan
from ragfactory.tasks.search.apex.plan_rewrite import accept_llm_rewrite, references, rewrite_step
from tests.prompts.templates import checked_template


@pytest.mark.parametrize("module", [plan_format, plan_rewrite, apex_execute])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


JAWS = ["Who directed Jaws?", "Who is the mother of #1?"]


@pytest.mark.parametrize(
    "text, questions, error",
    [
        ("<plan>\n1. Who directed Jaws?\n2. Who is the mother of #1?\n</plan>", JAWS, None),
        # the stop string cut </plan>
        ("Sure! Here is my plan:\n<plan>\n1) Who directed Jaws?\n2) Who is the mother of #1?", JAWS, None),
        ("Step 1: Who directed Jaws?\nStep 2: **Who is the mother of #1?**", JAWS, None),
        ("- Who directed Jaws?\n- Who is the mother of #1?", JAWS, None),
        ("<think>1. ignore me</think><plan>\n1. Who directed Jaws?\n</plan>\n2. After it", JAWS[:1], None),
        ("", [], "empty output"),
        ("Who directed Jaws? And who is his mother?", [], "no numbered sub-questions"),
        (
            "<plan>\n1. Who is the mother of #1?\n</plan>",
            ["Who is the mother of #1?"],
            "step 1 refers to #1, which is not an earlier step",
        ),
        (
            "<plan>\n1. Who directed Jaws?\n2. Who is the mother of #0?\n</plan>",
            ["Who directed Jaws?", "Who is the mother of #0?"],
            "step 2 refers to #0, which is not an earlier step",
        ),
        (
            "\n".join(f"{i}. Question {i}?" for i in range(1, 7)),
            [f"Question {i}?" for i in range(1, 7)],
            "6 sub-questions exceed the limit of 5",
        ),
    ],
    ids=[
        "tagged",
        "unclosed-prose",
        "step-labels-bold",
        "bullets",
        "think-and-after",
        "empty",
        "prose",
        "self-ref",
        "zero-ref",
        "too-long",
    ],
)
def test_parse_plan(text, questions, error):
    plan = parse_plan(text)
    assert (plan.questions, plan.error) == (questions, error)
    assert [s.step for s in plan.steps] == list(range(1, len(questions) + 1))


def test_parsed_steps_keep_their_line_and_dependencies():
    plan = parse_plan("<plan>\n1. Who won?\n2. When did #1 and the runner-up meet?\n3. Where did #1 meet #2?</plan>")
    assert [s.depends_on for s in plan.steps] == [(), (1,), (1, 2)]
    assert plan.steps[1].row() == {
        "step": 2,
        "question": "When did #1 and the runner-up meet?",
        "original": "2. When did #1 and the runner-up meet?",
        "depends_on": [1],
    }


@pytest.mark.parametrize(
    "original, expected",
    [
        ("Oh Yeah >> performer", "Who is the performer of Oh Yeah?"),
        ("#2 >> located in the administrative territorial entity", "In which county, city or region is #2 located?"),
        ("#3 >> shares border with", "What borders #3?"),
        ("Craig Westcarr >> member of sports team", "Which sports team is Craig Westcarr a member of?"),
        ("Paris >> Capital Of", "What is Paris the capital of?"),
        ("Oh Yeah >> tempo marking", "What is the tempo marking of Oh Yeah?"),
        ("when did #1 win the fa cup", "when did #1 win the fa cup"),
        ("  Who   issued the manifesto? ", "Who issued the manifesto?"),
    ],
)
def test_symbolic_steps_read_as_questions(original, expected):
    assert rewrite_step(original) == expected
    assert references(rewrite_step(original)) == references(original)


def test_every_bundled_musique_step_rewrites_to_a_question():
    steps = [s["question"] for q in load_bundled("musique").questions for s in q["gold_plan"]]
    rewritten = [rewrite_step(s) for s in steps]
    assert sum(">>" in s for s in steps) > 100
    assert not any(">>" in s for s in rewritten)
    assert all(references(a) == references(b) for a, b in zip(steps, rewritten))
    symbolic = [r for s, r in zip(steps, rewritten) if ">>" in s]
    generic = [r for r in symbolic if r.startswith("What is the ") and " of " in r]
    assert len(generic) < len(symbolic) / 4  # most relations have their own wording


@pytest.mark.parametrize(
    "output, expected",
    [
        ("<question>Who performed Oh Yeah?</question>", "Who performed Oh Yeah?"),
        ("Who performed Oh Yeah?", "Who performed Oh Yeah?"),
        ("<question></question>", "Who is the performer of Oh Yeah?"),
        ("<question>Who performed #1?</question>", "Who is the performer of Oh Yeah?"),  # a reference appeared
    ],
)
def test_llm_rewrite_is_checked(output, expected):
    assert accept_llm_rewrite("Oh Yeah >> performer", output) == expected


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"question_id": "q", "gold_plan": [{"step": 1, "question": "A >> b"}]}, ["A >> b"]),
        ({"question_id": "q", "gold_plan": None}, None),
        (
            {"question_id": "q", "gold_plan": None, "metadata": json.dumps({"gold_plan": ["X?", "Y #1?"]})},
            ["X?", "Y #1?"],
        ),
        ({"question_id": "q", "metadata": "{}"}, None),
    ],
)
def test_gold_plan_texts(row, expected):
    assert gold_plan_texts(row) == expected


@pytest.mark.parametrize(
    "value, message", [(42, "list of steps"), ([{"step": 1}], "step 1 has no question"), ("[", "not JSON")]
)
def test_bad_gold_plan_names_question_and_field(value, message):
    with pytest.raises(ValueError, match=rf"question 'q7': field 'gold_plan': .*{message}"):
        gold_plan_texts({"question_id": "q7", "gold_plan": value})


@pytest.mark.parametrize(
    "text, answers, expected",
    [
        ("When did #2 agree to #3?", ["NATO", "the USSR", "NATO"], "When did the USSR agree to NATO?"),
        ("Who is the father of #2?", ["Cleopatra IV"], "Who is the father of #2?"),  # no step 2 yet
        ("Who is the father of #1?", [None], "Who is the father of #1?"),  # step 1 gave no answer
    ],
)
def test_resolve_references(text, answers, expected):
    assert resolve_references(text, answers) == expected


@pytest.mark.parametrize(
    "call, text, decision, error",
    [
        ("sufficiency", "<reasoning>r</reasoning> <decision>Answer</decision>", "answer", None),
        ("sufficiency", "<decision> retrieve", "retrieve", None),
        ("sufficiency", "I should look it up.", "retrieve", "missing <decision>"),
        ("sufficiency", "<decision>maybe</decision>", "retrieve", "<decision> is not one of ['answer', 'retrieve']"),
        ("continue", "<decision>continue</decision>", "continue", None),
        ("continue", "", "stop", "missing <decision>"),
    ],
)
def test_decisions_default_to_caution(call, text, decision, error):
    parsed = parse_decision(text, call)
    assert (parsed.get("decision"), parsed.error) == (decision, error)


@pytest.mark.parametrize(
    "answer, knowledge, expected",
    [
        ("Leah Adler", [("q1", "Steven Spielberg"), ("q2", "Leah Adler")], (1.0, 1.0, 1.0)),
        ("Leah Adler", [("q1", None), ("q2", "Leah Adler")], (1.0, 0.0, 1.0)),
        ("It is probably Leah Adler", [("q1", "Steven Spielberg")], (1.0, 1.0, 0.0)),
        (
            "The answer cannot be determined from the evidence that was gathered so far",
            [("q1", "unknown")],
            (0.0, 0.0, 0.0),
        ),
        (None, [], (0.0, 0.0, 0.0)),
    ],
)
def test_confidence_parts(answer, knowledge, expected):
    result = confidence(answer, knowledge)
    assert (result["specificity"], result["evidence"], result["certainty"]) == expected
    assert result["confidence"] == pytest.approx(sum(expected) / 3)


APEX_PROMPTS = {  # name: (placeholders, a phrase carrying its Appendix E / §2.4 description)
    "apex_plan": ({"question", "max_steps"}, "write #n in place of that answer"),
    "apex_rewrite": ({"step"}, "Keep every #n exactly as written"),
    "apex_sufficiency": ({"sub_question", "knowledge"}, "<decision>retrieve</decision>"),
    "apex_knowledge_answer": ({"sub_question", "knowledge"}, "always give a decisive answer"),
    "apex_continue": ({"sub_question", "knowledge", "documents", "hops", "max_hops"}, "retrieval hops have been made"),
    "apex_query_first": ({"sub_question", "knowledge"}, "one targeted search query"),
    "apex_query_next": ({"sub_question", "knowledge", "queries", "documents"}, "Do not repeat any previous query"),
    "apex_sub_answer": ({"sub_question", "knowledge", "documents"}, "Extract the answer from the documents"),
    "apex_synthesis": ({"question", "knowledge"}, "Combine the sub-answers"),
}


@pytest.mark.parametrize("name", sorted(APEX_PROMPTS))
def test_apex_prompts_load_with_their_placeholders(name):
    checked_template(name, *APEX_PROMPTS[name])
