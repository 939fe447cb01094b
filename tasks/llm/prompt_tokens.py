"""A prompt's token ids from the lines it shares with earlier prompts, tokenized once.

In a tree every node's prompt repeats its ancestors' lines (the question, the steps so far, the
passages they retrieved), so an engine that tokenizes each prompt whole spends most of that work
on lines it has tokenized before: the null engine's prompts averaged 3,500 characters, 1.2 ms a
prompt, a quarter of a null build's time per node.

A byte-level BPE tokenizer with GPT-2's pre-tokenizer (``ByteLevel`` with ``use_regex``, no
normalizer: SmolLM2's, the embedded model's) splits text with the regex
``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`` and merges
bytes within each piece only. Where a newline has a visible character on each side, ``a\\nb``,
no piece crosses it: only the two whitespace alternatives can hold the newline, and neither
takes the ``b`` after it. The ``a`` before it keeps the newline a piece of its own whether the
text goes on or ends there (after spaces, ``a \\n``, the last alternative would take the spaces
and the newline together at the end of a text, and the spaces alone before ``b``: no cut there).
So the text's ids are its lines' ids, cut after each such newline, in order; ``LineTokens``
keeps the lines it has seen, up to ``max_chars`` characters of them.

Any other tokenizer (SentencePiece's ``▁`` and byte fallback, another split regex, a normalizer)
is tokenized whole: ``cuts_lines`` says which are safe. ``tests/llm/test_prompt_tokens.py``
checks the cut ids against the whole text's on edge cases and on the bundled datasets' prompts.
"""

from __future__ import annotations

import json
import re
import threading
from array import array
from collections.abc import Callable

# a newline between two visible ASCII characters: no GPT-2 pre-token crosses it
CUT = re.compile(r"(?<=[!-~]\n)(?=[!-~])")


def cuts_lines(tokenizer) -> bool:
    """Whether ``tokenizer`` (a transformers fast tokenizer) pre-tokenizes as GPT-2's byte-level
    BPE does, with no normalizer: the tokenizers whose ids ``LineTokens`` may join."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    spec = json.loads(backend.to_str())
    pre = spec.get("pre_tokenizer") or {}
    return (
        spec.get("normalizer") is None
        and not any("\n" in added.get("content", "") for added in spec.get("added_tokens") or [])
        and (spec.get("model") or {}).get("type") == "BPE"
        and pre.get("type") == "ByteLevel"
        and pre.get("use_regex", True)
        and not pre.get("add_prefix_space", False)
    )


class LineTokens:
    """``tokenize`` (text to ids) applied line by line, each line's ids kept for the next prompt
    that repeats it; thread-safe, bounded by ``max_chars`` characters of kept lines (their ids
    kept as 4-byte integers: about 2 bytes a character in all, 16 MB at the default bound)."""

    def __init__(self, tokenize: Callable[[str], list[int]], max_chars: int = 1 << 23):
        self.tokenize, self.max_chars = tokenize, max_chars
        self._lines: dict[str, array] = {}
        self._chars = 0
        self._lock = threading.Lock()

    def __call__(self, text: str) -> tuple[int, ...]:
        ids: list[int] = []
        for line in CUT.split(text):
            with self._lock:
                known = self._lines.get(line)
            if known is None:
                known = array("i", self.tokenize(line))
                self._keep(line, known)
            ids += known
        return tuple(ids)

    def _keep(self, line: str, ids: array) -> None:
        with self._lock:
            if self._chars + len(line) > self.max_chars:
                self._lines.clear()  # bounded: a build's lines come back within a few prompts
                self._chars = 0
            if line not in self._lines:
                self._lines[line] = ids
                self._chars += len(line)
