"""Prompt prefixes an engine has prefilled: their KV caches by token prefix, and what to share.

A search tree's prompts repeat their ancestors' history, and siblings share all of it; an
evaluation's prompts all start with one instruction. ``PrefixStore`` keeps the keys and values of
prefilled prefixes (one tensor pair per layer, one row, no padding) so a later prompt that starts
with one of them prefills only what follows. Like vLLM's automatic prefix caching it addresses
prefixes in whole blocks of ``block`` tokens: the hash of block k chains the hash of block k - 1,
so a prompt's every block-aligned prefix has its own key, found in one pass over the prompt. An
entry is indexed under every block hash of its tokens, so a prompt that shares only its first
blocks with an entry reads just those; a hit is checked token by token, so a hash collision
costs a miss, never a wrong cache. An entry that is a prefix of a new one is dropped: the new one
holds its blocks. Entries leave least recently used first once their bytes pass ``capacity``.

``branch_points`` finds, among one engine call's prompts, the prefixes two or more of them share
(sorted, neighbours' longest common prefixes, floored to whole blocks): each is prefilled once
and the prompts extend it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

BLOCK = 16  # tokens per block: the granularity of a shared prefix (vLLM's default block size)


def block_hashes(tokens: Sequence[int], block: int = BLOCK) -> list[int]:
    """Chained hashes of the whole blocks of ``tokens``: item k covers ``tokens[: (k + 1) * block]``."""
    hashes, running = [], 0
    for start in range(0, len(tokens) - block + 1, block):
        running = hash((running, tuple(tokens[start : start + block])))
        hashes.append(running)
    return hashes


@dataclass(eq=False)
class Entry:
    """One stored prefix: its tokens and its keys and values, ``[1, heads, len(tokens), dim]`` a layer."""

    tokens: tuple[int, ...]
    kv: list[tuple[Any, Any]]
    nbytes: int
    hashes: list[int]


class PrefixStore:
    """KV caches of prefilled prefixes, least recently used out once they pass ``capacity`` bytes."""

    def __init__(self, capacity: int, token_bytes: int, block: int = BLOCK):
        self.capacity = capacity
        self.token_bytes = token_bytes  # KV bytes of one token, every layer
        self.block = block
        self.bytes = 0
        self._lru: OrderedDict[int, Entry] = OrderedDict()  # by id(entry)
        self._index: dict[int, list[Entry]] = {}  # block hash -> entries that hold that prefix

    def __len__(self) -> int:
        return len(self._lru)

    def lookup(self, tokens: Sequence[int], limit: int) -> tuple[int, Entry | None]:
        """The longest stored block-aligned prefix of ``tokens[:limit]``: its length and entry."""
        hashes = block_hashes(tokens[:limit], self.block)
        for k in range(len(hashes) - 1, -1, -1):
            length = (k + 1) * self.block
            for entry in reversed(self._index.get(hashes[k], ())):
                if entry.tokens[:length] == tuple(tokens[:length]):
                    self._lru.move_to_end(id(entry))
                    return length, entry
        return 0, None

    def covers(self, tokens: Sequence[int]) -> bool:
        """Whether a stored entry holds all of ``tokens`` (a whole number of blocks)."""
        return self.lookup(tokens, len(tokens))[0] == len(tokens)

    def insert(self, tokens: Sequence[int], kv: list[tuple[Any, Any]]) -> bool:
        """Store a prefix of whole blocks; False when it cannot fit or is held already."""
        tokens = tuple(tokens)
        nbytes = len(tokens) * self.token_bytes
        if not tokens or len(tokens) % self.block or nbytes > self.capacity or self.covers(tokens):
            return False
        entry = Entry(tokens, kv, nbytes, block_hashes(tokens, self.block))
        for k, key in enumerate(entry.hashes):
            length = (k + 1) * self.block
            for old in list(self._index.get(key, ())):
                if len(old.tokens) == length and old.tokens == tokens[:length]:
                    self._drop(old)  # the new entry holds every block of it
            self._index.setdefault(key, []).append(entry)
        self._lru[id(entry)] = entry
        self.bytes += nbytes
        while self.bytes > self.capacity:
            self._drop(next(iter(self._lru.values())))
        return True

    def clear(self) -> None:
        self._lru.clear()
        self._index.clear()
        self.bytes = 0

    def _drop(self, entry: Entry) -> None:
        del self._lru[id(entry)]
        self.bytes -= entry.nbytes
        for key in entry.hashes:
            held = self._index.get(key, [])
            if entry in held:
                held.remove(entry)
            if not held:
                self._index.pop(key, None)


def branch_points(prompts: Sequence[Sequence[int]], block: int = BLOCK) -> list[tuple[int, ...]]:
    """The block-aligned prefixes two or more distinct prompts share, shortest first.

    In sorted order a prompt's longest shared prefix is shared with a neighbour, so the
    neighbours' longest common prefixes are the tree's branch points. Each is floored to whole
    blocks and kept shorter than both prompts (a prompt's last token is always prefilled: its
    logits start the decode).
    """
    ordered = sorted({tuple(p) for p in prompts})
    points = set()
    for a, b in zip(ordered, ordered[1:]):
        common = _common_length(a, b)
        length = min(common, len(a) - 1, len(b) - 1) // block * block
        if length > 0:
            points.add(a[:length])
    return sorted(points, key=len)


def levels(prefixes: Sequence[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
    """``prefixes`` (shortest first) in rounds: each one after every other one it extends."""
    depth: dict[tuple[int, ...], int] = {}
    for prefix in prefixes:
        parents = [depth[p] for p in depth if len(p) < len(prefix) and prefix[: len(p)] == p]
        depth[prefix] = 1 + max(parents, default=-1)
    rounds: list[list[tuple[int, ...]]] = [[] for _ in range(1 + max(depth.values(), default=-1))]
    for prefix, level in depth.items():
        rounds[level].append(prefix)
    return rounds


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
