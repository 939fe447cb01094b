"""Tolerant parsing of tagged outputs: the shared tag primitives and Search-R1's rollout turn."""

from __future__ import annotations

import pytest

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
