"""Tag primitives the strategies' step parsers share, and Search-R1's rollout turn.

A step format is a prompt that asks for tagged output: each strategy reads its own in its folder
(``<name>/steps.py``) with these primitives. ``parse_tagged`` reads the common shape "free
thinking, then one required tag" and ``parse_query`` a bare search query. The rollout turn is
Search-R1's (Jin et al. 2025): reasoning that ends in ``<search>`` or ``<answer>``, answered by
``<information>``; several searches, the agentic GRPO rollout and a process reward read it:
``ROLLOUT_STOP`` ends it, ``information`` renders the passages that answer a search.

Parsing is tolerant, because models are: text around tags is kept as reasoning, tag names are
case-insensitive, a ``<think>…</think>`` block (reasoning models) is ignored, and a tag opened but
never closed runs to the next tag or the end of the text (engines drop the stop string that cut
it). A required tag that is missing or empty is not an exception: the result carries ``error``,
which becomes the node's ``format_error``, and the strategy carries on without that branch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TAGS = ("reasoning", "question", "answer", "search", "information", "think")
_THINK_BLOCK = re.compile(r"<\s*think\s*>.*?<\s*/\s*think\s*>", re.IGNORECASE | re.DOTALL)
_ANY_TAG = re.compile(r"<\s*/?\s*(?:" + "|".join(TAGS) + r")\s*>", re.IGNORECASE)
# A rollout turn ends at its action; engines drop the stop string.
ROLLOUT_STOP = ("</search>", "</answer>")
_QUERY_PREFIX = re.compile(r"^\s*(?:search\s+)?query\s*[:：]\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Parsed:
    """The fields read from one output, and why it is malformed (``None`` when it is not)."""

    fields: dict[str, str | None] = field(default_factory=dict)
    error: str | None = None

    def get(self, name: str) -> str | None:
        return self.fields.get(name)


def _open(tag: str) -> re.Pattern:
    return re.compile(rf"<\s*{tag}\s*>", re.IGNORECASE)


def _close(tag: str) -> re.Pattern:
    return re.compile(rf"<\s*/\s*{tag}\s*>", re.IGNORECASE)


def visible_text(text: str | None) -> str:
    """The output without ``<think>`` blocks, stripped; ``None`` reads as empty."""
    return _THINK_BLOCK.sub(" ", text or "").strip()


def tag_span(text: str, tag: str) -> tuple[int, str] | None:
    """(start offset, stripped content) of the first ``<tag>``, or ``None`` when it never opens.

    An unclosed tag runs to the next known tag or the end of the text.
    """
    opened = _open(tag).search(text)
    if opened is None:
        return None
    rest = text[opened.end() :]
    closed = _close(tag).search(rest)
    if closed is None:
        closed = _ANY_TAG.search(rest)
    content = rest[: closed.start()] if closed else rest
    return opened.start(), content.strip()


def first_tag(text: str, tags: Iterable[str]) -> tuple[str, str] | None:
    """(tag, stripped content) of whichever of ``tags`` opens first in ``text`` (the one a
    reader of the output would take), or ``None`` when none opens."""
    spans = [(span[0], tag, span[1]) for tag in tags if (span := tag_span(text, tag)) is not None]
    if not spans:
        return None
    _, tag, content = min(spans)
    return tag, content


def find_tag(text: str | None, tag: str) -> str | None:
    """The stripped content of the first ``<tag>…</tag>`` of ``text``, or ``None``.

    >>> find_tag("I think. <answer> Paris </answer> done", "answer")
    'Paris'
    >>> find_tag("<ANSWER>Paris", "answer")
    'Paris'
    """
    span = tag_span(visible_text(text), tag)
    return None if span is None else span[1]


def text_before(text: str, tag: str) -> str:
    """The text before the first ``<tag>``, without tag markup: the model's reasoning."""
    opened = _open(tag).search(text)
    before = text[: opened.start()] if opened else text
    return " ".join(_ANY_TAG.sub(" ", before).split())


def required(text: str, tag: str) -> tuple[str | None, str | None]:
    """(content, error) of a tag the output must carry."""
    span = tag_span(text, tag)
    if span is None:
        return None, f"missing <{tag}>" if text else "empty output"
    if not span[1]:
        return None, f"empty <{tag}>"
    return span[1], None


def reasoning(text: str, before_tag: str) -> str:
    """The ``<reasoning>`` tag's content, else the text before ``before_tag``."""
    tagged = tag_span(text, "reasoning")
    return tagged[1] if tagged is not None else text_before(text, before_tag)


def parse_tagged(text: str | None, tag: str) -> Parsed:
    """Free thinking, then ``<tag>``: the fields ``reasoning`` and ``tag``.

    >>> parse_tagged("Known fact. <answer> China </answer>", "answer").fields
    {'reasoning': 'Known fact.', 'answer': 'China'}
    """
    body = visible_text(text)
    content, error = required(body, tag)
    return Parsed({"reasoning": text_before(body, tag), tag: content}, error)


def parse_query(text: str | None) -> Parsed:
    """A bare search query: a tag, a "Query:" prefix or quotes around it are dropped."""
    body = visible_text(text)
    for tag in ("search", "query"):
        span = tag_span(body, tag)
        if span is not None:
            body = span[1]
            break
    line = next((ln for ln in body.splitlines() if ln.strip()), "")
    query = _QUERY_PREFIX.sub("", line).strip().strip("\"'“”").strip()
    return Parsed({"query": query or None}, None if query else "empty query")


def parse_rollout_turn(text: str | None) -> Parsed:
    """Search-R1's turn: ``action`` is "search" (with ``query``), "answer" (with ``answer``) or None.

    The first of ``<search>`` / ``<answer>`` decides; ``<information>`` is never the model's.
    """
    body = visible_text(text)
    first = first_tag(body, ("search", "answer"))
    if first is None:
        error = "empty output" if not body else "missing <search> or <answer>"
        return Parsed({"action": None, "reasoning": body or None}, error)
    tag = first[0]
    content, error = required(body, tag)
    action = None if error else tag
    key = "query" if tag == "search" else "answer"
    return Parsed({"action": action, "reasoning": text_before(body, tag), key: content}, error)


def render_passages(hits: Iterable[Mapping]) -> str:
    """Search-R1's passage list: ``Doc i(Title: title) text``, one line each."""
    return "".join(f"Doc {i}(Title: {hit['title']}) {hit['text']}\n" for i, hit in enumerate(hits, start=1))


def information(hits: Iterable[Mapping]) -> str:
    """The observation of a search: the passages inside ``<information>``."""
    return f"<information>{render_passages(hits)}</information>"
