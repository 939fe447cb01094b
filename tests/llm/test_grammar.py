"""Grammar templates: the worst-case token bound and the budget fitted to ``max_tokens``.

Every expected number is the arithmetic written beside it: a literal costs one token per byte,
a bounded terminal its ``max_tokens``, an alternative its costliest branch, plus one token for
the end of sequence.
"""

from __future__ import annotations

import pytest

from ragfactory.tasks.llm.grammar import GrammarError, literal_bytes, render_grammar, token_bound

TAGGED = r"""
// a comment line, and a comment after a rule
start: "<a>" x "</a>" (y | "zz")?   // optional tail
x[max_tokens=5]: /[a-z]+/
y[max_tokens=7]: /[0-9]+/
"""

TEMPLATE = r"""
start: "<r>" r "</r>" (s | a)
r[max_tokens=$budget]: /[^<>]+/
s: "<s>" q "</s>"
a: "<a>" q "</a>" "!"
q[max_tokens=3]: /[a-z]+/
"""


def test_the_bound_is_the_costliest_path():
    # "<a>" 3 + x 5 + "</a>" 4 + max(y 7, "zz" 2) + end 1 = 20
    assert token_bound(TAGGED) == 20


def test_literals_count_bytes_escapes_included():
    assert literal_bytes('"<plan>\\n"') == 7  # < p l a n > and one newline
    assert literal_bytes('"é"') == 2  # two UTF-8 bytes: a token is at least one byte
    assert token_bound('start: "a" "b"\n     | "cde"\n') == 4  # max(1 + 1, 3) + end 1


def test_the_budget_is_what_max_tokens_leaves():
    # fixed: "<r>" 3 + "</r>" 4 + max(s: 3 + 3 + 4 = 10, a: 3 + 3 + 4 + 1 = 11) + end 1 = 19
    text, bound = render_grammar(TEMPLATE, 30)
    assert "r[max_tokens=11]" in text and bound == 30  # 30 - 19 = 11
    text, bound = render_grammar(TEMPLATE, 100)
    assert "r[max_tokens=81]" in text and bound == 100


def test_two_budgeted_fields_share_what_is_left():
    # "(" 1 + 2 budgets + ")" 1 + end 1: 2b + 3 <= 30 gives b = 13 and a bound of 29
    text, bound = render_grammar('start: "(" f g ")"\nf[max_tokens=$budget]: /a+/\ng[max_tokens=$budget]: /b+/\n', 30)
    assert text.count("max_tokens=13") == 2 and bound == 29


def test_too_small_a_max_tokens_names_what_it_needs():
    # 19 fixed + the least budget of 4 = 23
    with pytest.raises(GrammarError, match="needs max_tokens >= 23 .* got 20"):
        render_grammar(TEMPLATE, 20)


def test_other_placeholders_are_filled_and_a_missing_one_is_named():
    text, _ = render_grammar('start: "<$tag>"\n', 10, tag="plan")
    assert 'start: "<plan>"' in text
    with pytest.raises(GrammarError, match=r"\$tag has no value"):
        render_grammar('start: "<$tag>"\n', 10)


@pytest.mark.parametrize(
    "grammar,message",
    [
        ("start: x\nx: /a+/\n", "'x' matches a regex without a max_tokens bound"),
        ('start: "a"*\n', "unbounded repetition"),
        ('start: x\nx: "(" x ")"\n', "'x' is recursive"),
        ("start: y\n", "undefined 'y'"),
        ('rule: "a"\n', "no 'start' rule"),
        ('start: ("a"\n', "unbalanced"),
        ('%import common.WS\nstart: "a"\n', "not supported"),
    ],
)
def test_unbounded_or_broken_grammars_are_refused_by_name(grammar, message):
    with pytest.raises(GrammarError, match=message):
        token_bound(grammar)
