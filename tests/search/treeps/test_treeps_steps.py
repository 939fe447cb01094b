"""TreePS-RAG step text: the Search-R1 prompt with <reason>, step parsing, observations, spans."""

from __future__ import annotations

import pytest

from ragfactory.tasks.llm.types import Message
from ragfactory.tasks.prompts.loader import load_prompt, prompt_fields
from ragfactory.tasks.search.treeps.steps import (
    closed_step,
    information,
    initial_prompt,
    parse_step,
    render_response,
    step_turns,
)

HITS = [
    {"title": "Paris", "text": "Paris is the capital of France."},
    {"title": "France", "text": "France is in Europe."},
]


@pytest.mark.parametrize("name,tag", [("treeps_step", "reason"), ("treeps_search_r1", "think")])
def test_prompts_are_search_r1_with_their_reasoning_tag(name, tag):
    template = load_prompt(name)
    assert prompt_fields(template) == {"question"}
    assert f"You must conduct reasoning inside <{tag}> and </{tag}> first" in template
    assert "call a search engine by <search> query </search>" in template
    assert "between <information> and </information>" in template
    prompt = initial_prompt("Who wrote Dracula?", name)
    assert prompt.endswith("<answer> Beijing </answer>. Question: Who wrote Dracula?\n")


@pytest.mark.parametrize(
    "prompt,text,fields,error",
    [
        (
            "treeps_step",
            "<reason>Need the author.</reason> <search> Dracula author",
            {"action": "search", "query": "Dracula author", "reasoning": "Need the author."},
            None,
        ),
        (
            "treeps_step",
            "<reason>Known.</reason>\n<answer> Bram Stoker </answer>",
            {"action": "answer", "answer": "Bram Stoker", "reasoning": "Known."},
            None,
        ),
        (
            "treeps_search_r1",
            "<think>Known.</think> <answer> Bram Stoker </answer>",
            {"action": "answer", "answer": "Bram Stoker", "reasoning": "Known."},
            None,
        ),
        ("treeps_step", "It is <answer> Bram Stoker", {"action": "answer", "reasoning": "It is"}, None),
        (
            "treeps_step",
            "<reason>Hmm.</reason> <search>  </search>",
            {"action": None, "reasoning": "Hmm."},
            "empty <search>",
        ),
        ("treeps_step", "No idea.", {"action": None}, "missing <search> or <answer>"),
        ("treeps_step", "", {"action": None, "reasoning": None}, "empty output"),
    ],
)
def test_parse_step(prompt, text, fields, error):
    parsed = parse_step(text, prompt)
    assert parsed.error == error
    for name, value in fields.items():
        assert parsed.get(name) == value, name


@pytest.mark.parametrize(
    "text,action,closed",
    [
        ("<search> x", "search", "<search> x </search>"),
        ("<search> x </search>", "search", "<search> x </search>"),
        ("<answer> y  ", "answer", "<answer> y </answer>"),
        ("junk", None, "junk"),
    ],
)
def test_closed_step_restores_the_stop_string(text, action, closed):
    assert closed_step(text, action) == closed


def test_observation_is_search_r1_passage_list():
    assert information(HITS) == (
        "<information>Doc 1(Title: Paris) Paris is the capital of France.\n"
        "Doc 2(Title: France) France is in Europe.\n</information>"
    )


def test_response_spans_cover_steps_and_observations_exactly():
    turns = step_turns("<search> capital </search>", HITS) + step_turns("<answer> Paris </answer>", None)
    text, steps, observations = render_response(turns)
    assert text == f"<search> capital </search>\n\n{information(HITS)}\n\n<answer> Paris </answer>"
    pieces = sorted([(s.start, s.end) for s in steps + observations])
    assert pieces[0][0] == 0 and pieces[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))  # no gap, no overlap
    assert text[observations[0].start : observations[0].end] == f"\n\n{information(HITS)}\n\n"


def test_response_refuses_a_system_turn():
    with pytest.raises(ValueError, match="assistant or user"):
        render_response([Message("system", "x")])
