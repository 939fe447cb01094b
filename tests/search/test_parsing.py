"""Tolerant parsing of the tagged outputs of the DecEx-RAG prompts (Appendix A.1)."""

from __future__ import annotations

import pytest

from ragfactory.tasks.search.decex.steps import (
    parse_self_answer,
    parse_sub_query,
    parse_sub_question,
    parse_termination,
)
from ragfactory.tasks.search.parsing import find_tag, parse_rollout_turn


@pytest.mark.parametrize(
    "text,tag,expected",
    [
        ("<answer>Paris</answer>", "answer", "Paris"),
        ("Some thought.\n<answer>  Paris \n</answer> trailing", "answer", "Paris"),
        ("<ANSWER>Paris</Answer>", "answer", "Paris"),
        ("< answer >Paris</ answer >", "answer", "Paris"),
        ("<answer> Paris", "answer", "Paris"),  # a stop string cut the closing tag
        ("<answer> Paris <reasoning> more", "answer", "Paris"),  # unclosed: runs to the next tag
        ("<answer>first</answer><answer>second</answer>", "answer", "first"),
        ("<think><answer>hidden</answer></think> <answer>shown</answer>", "answer", "shown"),
        ("no tags at all", "answer", None),
        ("", "answer", None),
        (None, "answer", None),
        ("<answer></answer>", "answer", ""),
    ],
)
def test_find_tag(text, tag, expected):
    assert find_tag(text, tag) == expected


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


@pytest.mark.parametrize(
    "text,action,key,value,error",
    [
        ("I need data. <search> Jaws director </search>", "search", "query", "Jaws director", None),
        ("I need data. <search> Jaws director", "search", "query", "Jaws director", None),
        ("So: <answer> Leah Adler </answer>", "answer", "answer", "Leah Adler", None),
        ("<search>a</search> <answer>b</answer>", "search", "query", "a", None),
        ("thinking without end", None, "reasoning", "thinking without end", "missing <search> or <answer>"),
        ("", None, "reasoning", None, "empty output"),
        ("<search></search>", None, "query", None, "empty <search>"),
    ],
)
def test_parse_rollout_turn(text, action, key, value, error):
    parsed = parse_rollout_turn(text)
    assert (parsed.get("action"), parsed.get(key), parsed.error) == (action, value, error)
