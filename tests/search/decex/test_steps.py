"""Tolerant parsing of the tagged outputs of the DecEx-RAG prompts (Appendix A.1)."""

from __future__ import annotations

import pytest

from ragfactory.tasks.search.decex.steps import (
    parse_self_answer,
    parse_sub_query,
    parse_sub_question,
    parse_termination,
)


@pytest.mark.parametrize(
    "text,decision,content,error",
    [
        ("<reasoning>Enough.</reasoning> <answer>Paris</answer>", "terminate", ("answer", "Paris"), None),
        ("<reasoning>Need more.</reasoning>\n<question>Who?</question>", "continue", ("question", "Who?"), None),
        ("Preamble. <question>Who?</question> then <answer>x</answer>", "continue", ("question", "Who?"), None),
        ("<answer>x</answer> <question>Who?</question>", "terminate", ("answer", "x"), None),
        (
            "<reasoning>Hmm</reasoning>",
            None,
            ("reasoning", "<reasoning>Hmm</reasoning>"),
            "missing <answer> or <question>",
        ),
        ("", None, ("reasoning", None), "empty output"),
        ("   \n", None, ("reasoning", None), "empty output"),
        ("<answer>  </answer>", None, ("answer", None), "empty <answer>"),
    ],
)
def test_parse_termination(text, decision, content, error):
    parsed = parse_termination(text)
    assert parsed.get("decision") == decision
    assert parsed.get(content[0]) == content[1]
    assert parsed.error == error


def test_termination_reasoning_from_tag_or_text_before():
    tagged = parse_termination("x <reasoning> We know it. </reasoning> <answer>Paris</answer>")
    untagged = parse_termination("We know it.  <answer>Paris</answer>")
    assert tagged.get("reasoning") == untagged.get("reasoning") == "We know it."


@pytest.mark.parametrize(
    "parse,text,field,value,reasoning,error",
    [
        (
            parse_sub_question,
            "First the director. <question>Who directed Jaws?</question>",
            "question",
            "Who directed Jaws?",
            "First the director.",
            None,
        ),
        (parse_sub_question, "I am not sure.", "question", None, "I am not sure.", "missing <question>"),
        (parse_sub_question, "", "question", None, "", "empty output"),
        (parse_sub_question, "<question> </question>", "question", None, "", "empty <question>"),
        (parse_self_answer, "Known fact. <answer> China </answer>", "answer", "China", "Known fact.", None),
        (parse_self_answer, "China", "answer", None, "China", "missing <answer>"),
    ],
)
def test_parse_step_outputs(parse, text, field, value, reasoning, error):
    parsed = parse(text)
    assert (parsed.get(field), parsed.get("reasoning"), parsed.error) == (value, reasoning, error)


@pytest.mark.parametrize(
    "text,query,error",
    [
        ("Steven Spielberg mother", "Steven Spielberg mother", None),
        ("  Query: Spielberg mother name\n", "Spielberg mother name", None),
        ('"Jaws director"', "Jaws director", None),
        ("<search> Jaws director </search>", "Jaws director", None),
        ("<think>hm</think>\nJaws director\nsecond line", "Jaws director", None),
        ("", None, "empty query"),
        ("   ", None, "empty query"),
        ("Query:", None, "empty query"),
    ],
)
def test_parse_sub_query(text, query, error):
    parsed = parse_sub_query(text)
    assert (parsed.get("query"), parsed.error) == (query, error)
