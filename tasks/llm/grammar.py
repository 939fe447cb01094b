"""Output grammars: render a grammar template for a token budget, and bound its output length.

docs/architecture.md, "Structured generation". A prompt that expects tagged output ships its grammar
beside it (``tasks/prompts/<name>.lark``) in llguidance's Lark dialect, the form vLLM's ``guidance``
structured-output backend and our transformers decode loop both compile. Every free-text field is a
terminal rule with a ``max_tokens`` bound, so the grammar itself ends every output:

    reasoning[max_tokens=$budget]: /[^<>]+/
    answer[max_tokens=16]: /[^<>\\s][^<>\\n]*/

A fixed bound (the answer's 16 tokens) is a property of the data; ``$budget`` is what is left of
the request's ``max_tokens`` once everything else is counted. ``render_grammar`` solves for the
largest budget whose worst case still fits, so every output closes inside ``max_tokens``: no
sample is cut mid-field by the engine's limit.

The worst case (``token_bound``) is the longest path through the rules: a bounded terminal
costs its ``max_tokens``, a literal one token per byte (a token is never shorter than a byte),
an alternative its costliest branch, ``x?`` the cost of ``x``, plus one token for the end of
sequence. The bound needs a grammar without unbounded repetition (``*``, ``+``), recursion or
an unbounded regex; ``token_bound`` refuses those, naming the rule.

What it cannot see: llguidance's own features beyond this subset (``%json``, ``%import``,
lazy lexemes) are refused rather than bounded; the grammars we ship do not need them.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass

BUDGET = "budget"
MIN_BUDGET = 4  # a free-text field shorter than this cannot hold a sentence worth training on

_TOKEN = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\])*"i?)|(?P<regex>/(?:\\.|[^/\\])+/[imsx]*)|"""
    r"""(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>[()|?*+])|(?P<space>\s+)|(?P<bad>.)"""
)
_RULE = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?:\[(?P<attrs>[^\]]*)\])?\s*:(?P<body>.*)$")
_MAX_TOKENS = re.compile(r"\bmax_tokens\s*=\s*(\d+)")


class GrammarError(ValueError):
    """A grammar this module cannot render or bound."""


@dataclass(frozen=True)
class _Rule:
    name: str
    body: list[tuple[str, str]]  # (kind, text) tokens of the expansion
    max_tokens: int | None


def parse_rules(text: str) -> dict[str, _Rule]:
    """The rules of a Lark grammar: ``name[attrs]: body`` lines, ``|`` lines continuing them."""
    rules: dict[str, _Rule] = {}
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw).rstrip()
        if not line.strip():
            continue
        if line.lstrip().startswith("|") and current is not None:
            rule = rules[current]
            rules[current] = _Rule(
                rule.name, rule.body + [("op", "|")] + _tokens(line.lstrip()[1:], number), rule.max_tokens
            )
            continue
        if line.lstrip().startswith("%"):
            raise GrammarError(f"line {number}: directive {line.strip()!r} is not supported here")
        match = _RULE.match(line)
        if match is None:
            raise GrammarError(f"line {number}: expected 'name: expansion', got {line.strip()!r}")
        bound = _MAX_TOKENS.search(match["attrs"] or "")
        current = match["name"]
        if current in rules:
            raise GrammarError(f"line {number}: rule {current!r} is defined twice")
        rules[current] = _Rule(current, _tokens(match["body"], number), int(bound[1]) if bound else None)
    if "start" not in rules:
        raise GrammarError("the grammar has no 'start' rule")
    return rules


def _strip_comment(line: str) -> str:
    """The line without a trailing ``//`` comment (one inside a string or regex is kept)."""
    out, pos = [], 0
    for match in _TOKEN.finditer(line):
        if match["bad"] == "/" and line.startswith("//", match.start()):
            return line[: match.start()]
        out.append(match[0])
        pos = match.end()
    return "".join(out) + line[pos:]


def _tokens(body: str, number: int) -> list[tuple[str, str]]:
    tokens = []
    for match in _TOKEN.finditer(body):
        kind = match.lastgroup
        if kind == "space":
            continue
        if kind == "bad":
            raise GrammarError(f"line {number}: unexpected {match[0]!r}")
        tokens.append((kind, match[0]))
    return tokens


def literal_bytes(token: str) -> int:
    """UTF-8 length of a Lark string literal (``"…"`` with escapes)."""
    body = token[1:-2] if token.endswith('"i') else token[1:-1]
    return len(body.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("utf-8"))


def token_bound(text: str) -> int:
    """The most tokens an output of the grammar can take, end-of-sequence included."""
    rules = parse_rules(text)
    return _rule_cost(rules, "start", ()) + 1


def _rule_cost(rules: Mapping[str, _Rule], name: str, stack: tuple[str, ...]) -> int:
    if name not in rules:
        raise GrammarError(f"rule {stack[-1] if stack else 'start'!r} refers to undefined {name!r}")
    if name in stack:
        raise GrammarError(f"rule {name!r} is recursive: {' -> '.join(stack + (name,))}")
    rule = rules[name]
    if rule.max_tokens is not None:
        return rule.max_tokens
    if any(kind == "regex" for kind, _ in rule.body):
        raise GrammarError(f"rule {name!r} matches a regex without a max_tokens bound")
    cost, rest = _alternatives(rules, rule.body, stack + (name,))
    if rest:
        raise GrammarError(f"rule {name!r}: unbalanced ')'")
    return cost


def _alternatives(rules, tokens, stack) -> tuple[int, list]:
    """Cost of ``a | b | …`` up to an unmatched ')' (returned with what follows it)."""
    best, total = 0, 0
    while tokens:
        kind, text = tokens[0]
        if kind == "op" and text == ")":
            break
        tokens = tokens[1:]
        if kind == "op" and text == "|":
            best, total = max(best, total), 0
            continue
        if kind == "op" and text == "(":
            cost, tokens = _alternatives(rules, tokens, stack)
            if not tokens:
                raise GrammarError(f"rule {stack[-1]!r}: unbalanced '('")
            tokens = tokens[1:]
        elif kind == "string":
            cost = literal_bytes(text)
        elif kind == "name":
            cost = _rule_cost(rules, text, stack)
        else:
            raise GrammarError(f"rule {stack[-1]!r}: {text!r} out of place")
        if tokens and tokens[0] == ("op", "?"):
            tokens = tokens[1:]
        elif tokens and tokens[0][0] == "op" and tokens[0][1] in "*+":
            raise GrammarError(f"rule {stack[-1]!r}: unbounded repetition {tokens[0][1]!r}")
        total += cost
    return max(best, total), tokens


def fill(template: str, params: Mapping[str, object]) -> str:
    """``$name`` placeholders of a template filled in; a missing one is an error naming it."""
    try:
        return string.Template(template).substitute({k: str(v) for k, v in params.items()})
    except KeyError as exc:
        raise GrammarError(f"grammar placeholder ${exc.args[0]} has no value") from None


def render_grammar(template: str, max_tokens: int, **params: object) -> tuple[str, int]:
    """(grammar text, its token bound) with the largest ``$budget`` that fits ``max_tokens``.

    A template without ``$budget`` is rendered as is and must fit on its own.
    """
    if f"${BUDGET}" not in template and "${" + BUDGET + "}" not in template:
        text = fill(template, params)
        bound = token_bound(text)
        if bound > max_tokens:
            raise GrammarError(f"needs max_tokens >= {bound}, got {max_tokens}")
        return text, bound

    def bound_for(budget: int) -> int:
        return token_bound(fill(template, {**params, BUDGET: budget}))

    if bound_for(MIN_BUDGET) > max_tokens:
        raise GrammarError(
            f"needs max_tokens >= {bound_for(MIN_BUDGET)} for free text of {MIN_BUDGET} tokens, got {max_tokens}"
        )
    low, high = MIN_BUDGET, max_tokens  # the bound grows with the budget: bisect the largest fit
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if bound_for(middle) <= max_tokens else (low, middle - 1)
    budget = low
    text = fill(template, {**params, BUDGET: budget})
    return text, token_bound(text)
