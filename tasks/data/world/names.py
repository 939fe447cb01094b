"""Invented names for the world's entities: unique by construction, seen by no model.

A name is an index written in a mixed radix of syllables, so two indexes never give the same
name and nothing has to remember the names already handed out (a 10 M-passage corpus keeps no
set of strings). The index is first permuted by an affine map modulo the number of names, keyed
by the seed, so consecutive entities do not read alike (``Bakor``, ``Bakos``, ...) and another
seed names everything differently. Each kind has its own syllable shape and suffixes, so a
person, a city, a country and a company read as what they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "th", "dr", "qu", "sk")
VOWELS = ("a", "e", "i", "o", "u", "ae", "y")
CODAS = ("", "n", "r", "l", "s", "th", "x")
SYLLABLES = tuple(o + v + c for o in ONSETS for v in VOWELS for c in CODAS)  # 882

CITY_SUFFIXES = ("mere", "holt", "ford", "gard", "wick", "port", "stead", "vale")
COUNTRY_SUFFIXES = ("ia", "esh", "land", "ovia", "istan", "ara")
COMPANY_SUFFIXES = ("Works", "Dynamics", "Holdings", "Foundry", "Labs", "Mills", "Shipping", "Textiles")


def _word(index: int, syllables: int) -> str:
    """``index`` (< 882**syllables) as a capitalised word of that many syllables."""
    parts = []
    for _ in range(syllables):
        index, digit = divmod(index, len(SYLLABLES))
        parts.append(SYLLABLES[digit])
    return "".join(parts).capitalize()


@dataclass(frozen=True)
class NameKind:
    """How one kind of entity is named: word shapes (syllables per word), a suffix list."""

    words: tuple[int, ...]
    suffixes: tuple[str, ...] = ()
    suffix_is_word: bool = False

    @property
    def capacity(self) -> int:
        return math.prod(len(SYLLABLES) ** n for n in self.words) * max(1, len(self.suffixes))

    def name(self, index: int) -> str:
        if not 0 <= index < self.capacity:
            raise ValueError(f"name index {index} out of range 0..{self.capacity - 1}")
        suffix = ""
        if self.suffixes:
            index, s = divmod(index, len(self.suffixes))
            suffix = self.suffixes[s]
        words = []
        for n in self.words:
            index, part = divmod(index, len(SYLLABLES) ** n)
            words.append(_word(part, n))
        if suffix and self.suffix_is_word:
            words.append(suffix)
        elif suffix:
            words[-1] += suffix
        return " ".join(words)


KINDS = {
    "person": NameKind(words=(2, 2)),  # "Tharo Vekin": 605 M names
    "city": NameKind(words=(2,), suffixes=CITY_SUFFIXES),  # "Drelmere"
    "country": NameKind(words=(2,), suffixes=COUNTRY_SUFFIXES),  # "Quaskovia"
    "company": NameKind(words=(2,), suffixes=COMPANY_SUFFIXES, suffix_is_word=True),  # "Zorba Works"
}


class Namer:
    """The ``i``-th name of a kind under a seed: ``Namer(seed).name("city", 3)``. Distinct
    indexes of one kind always give distinct names (an affine bijection, then the radix)."""

    def __init__(self, seed: int):
        self.seed = seed
        self._maps = {kind: self._affine(kind, spec.capacity) for kind, spec in KINDS.items()}

    def _affine(self, kind: str, modulus: int) -> tuple[int, int]:
        # a multiplier coprime with the modulus makes i -> (a*i + b) mod m a bijection
        a = (0x9E3779B1 * (self.seed + 1) + 2 * len(kind) + 1) % modulus
        while math.gcd(a, modulus) != 1:
            a += 1
        b = (0x85EBCA6B * (self.seed + 7) + 31 * len(kind)) % modulus
        return a, b

    def name(self, kind: str, index: int) -> str:
        spec = KINDS[kind]
        if not 0 <= index < spec.capacity:
            raise ValueError(f"the world has room for {spec.capacity:,} {kind} names, asked for index {index:,}")
        a, b = self._maps[kind]
        return spec.name((a * index + b) % spec.capacity)
