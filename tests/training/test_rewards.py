"""GRPO reward functions: answer parsing, EM / F1 against golden answers, format, lookup."""

from __future__ import annotations

import pytest

from ragfactory.tasks.rewards.functions import (
    answer_em_reward,
    answer_f1_reward,
    format_reward,
    parse_answer,
    reward_functions,
)


def _chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize(
    "text, answer",
    [
        ("<answer> Paris </answer>", "Paris"),
        ("<answer>Rome</answer> then <answer>Paris</answer>", "Paris"),
        ("no tag at all", None),
    ],
)
def test_parse_answer_takes_the_last_span(text, answer):
    assert parse_answer(text) == answer


@pytest.mark.parametrize(
    "text, em, f1",
    [
        ("<answer>Paris</answer>", 1.0, 1.0),
        ("<answer>the city of Paris</answer>", 0.0, pytest.approx(2 * (1 / 3) / (1 + 1 / 3))),
        ("Paris", 0.0, 0.0),
    ],
)
def test_answer_rewards_score_conversational_and_plain_completions(text, em, f1):
    gold = [["paris", "Paris, France"]]
    for completion in (_chat(text), text):
        assert answer_em_reward([[]], [completion], golden_answers=gold) == [em]
        assert answer_f1_reward([[]], [completion], golden_answers=gold) == [f1]


def test_answer_rewards_need_golden_answers():
    with pytest.raises(ValueError, match="golden_answers"):
        answer_em_reward([[]], ["<answer>x</answer>"])


@pytest.mark.parametrize(
    "text, score",
    [
        ("<reasoning>r</reasoning> <answer>x</answer>", 1.0),
        ("<answer>x</answer> trailing words", 0.0),
        ("<answer></answer>", 0.0),
        ("<answer>a</answer><answer>b</answer>", 0.0),
    ],
)
def test_format_reward(text, score):
    assert format_reward([[]], [_chat(text)]) == [score]


def test_reward_functions_look_up_builtins_and_hooks():
    def sepr(prompts, completions, **columns):
        return [0.5] * len(completions)

    assert reward_functions(["answer_em", "sepr"], {"sepr": sepr}) == [answer_em_reward, sepr]
    with pytest.raises(ValueError, match="sepr"):
        reward_functions(["sepr"])
