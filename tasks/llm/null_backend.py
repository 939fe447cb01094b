"""The null engine: random tokens under each request's grammar, with no model at all.

``backend: null`` answers every request without a forward pass: each sample is a seeded random
walk over the embedded model's vocabulary, held to the request's output grammar by the same
llguidance token masks the transformers decode loop uses (``tasks/llm/structured.py``). Every
constrained output therefore parses, so every strategy, valuation, export and warehouse path
runs exactly as with a model, at the factory's own speed. Two uses: measuring what the factory
costs per node apart from any engine (``benchmarks/factory.py``, ``benchmarks/memory.py``), and
checking a config end to end in seconds before a GPU night is spent on it.

What a sample is: its random stream is seeded by the request's messages, its seed plus the
sample index (as a real engine's row is), so a rebuild gives the same texts and the call cache
and call ids behave as with a real engine. A constrained step takes the tokens the grammar forces
(``compute_ff_tokens``: literals such as ``<answer>``) at once; otherwise it draws a token the
grammar allows, and with probability ``close_rate`` prefers one that can close the current field
(end of sequence, or ``<``, ``\\n`` or ``#`` when the grammar leaves free text after it), so a free-text field runs a
few tokens rather than to its ``max_tokens`` bound. A free request draws tokens from the
non-special vocabulary and ends at each step with probability ``close_rate``; stop strings cut
the text as the other engines do. Temperature and ``top_p`` are ignored: there is no
distribution to shape.

It registers unshared (``shared=False``, ``tasks/llm/registry.py``): each shard's batcher calls
its own engine object directly, with no ``CoalescingBackend`` in front, because a walk costs
the same alone as in a batch and the coalescer's gather wait (50 ms a call) would be most of a
null build's time. The tokenizer and its compiled grammars are still loaded once per process.

Token ids (docs/tokens.md): the prompt's are the tokenizer's ids of role-prefixed lines (the
null engine renders no chat template; lines it tokenized for an earlier prompt are not tokenized
again, ``prompt_tokens.py``), the completion's the walk's tokens; log-probabilities
are null, as there is no distribution.

The fingerprint (``null/<tokenizer>/<digest>``) differs from every real model's, so a null
build never reads a real model's cached calls, nor writes any a real build would read.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragfactory.tasks.llm.prompt_tokens import LineTokens
from ragfactory.tasks.llm.types import Completion, Grammar, Request

NULL_VERSION = "null-v1"  # bump when the walk changes what it emits
CLOSING_CHARS = ("<", "\n", "#")  # what opens the text after a free-text field in our grammars
PROBES = 3  # random tokens tried after a closing one: free text takes almost any, a tag none


@dataclass(frozen=True)
class NullSettings:
    """Settings of the null engine (``llm.policy.options``)."""

    close_rate: float = 0.15  # chance per step of closing the field: ~7 tokens a field, as short answers are
    tries: int = 8  # random ids tried against the mask before listing every allowed token


class NullBackend:
    """A ``Backend`` that samples grammar-valid random text; only the tokenizer is loaded."""

    def __init__(self, tokenizer_dir: str | Path, settings: NullSettings = NullSettings()):
        if not 0 < settings.close_rate <= 1:
            raise ValueError(f"null engine: close_rate must be in (0, 1], got {settings.close_rate}")
        self.tokenizer_dir = Path(tokenizer_dir)
        self.settings = settings
        self.fingerprint = null_fingerprint(self.tokenizer_dir, settings)
        self._masks = None

    def __repr__(self) -> str:
        return f"NullBackend({str(self.tokenizer_dir)!r})"

    def load(self):
        """The grammar masks over the tokenizer, built once per process and folder (~1 s)."""
        if self._masks is None:
            self._walker = _walker(self.tokenizer_dir, self.settings)
            self._masks = self._walker.masks
        return self._masks

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        self.load()
        return [self._answer(index, request) for index, request in enumerate(requests)]

    def _answer(self, index: int, request: Request) -> list[Completion]:
        sampling = request.sampling
        if sampling.n < 1 or sampling.max_tokens < 1:
            raise ValueError(
                f"request {index}: n and max_tokens must be >= 1, got n={sampling.n}, max_tokens={sampling.max_tokens}"
            )
        digest = hashlib.sha256(json.dumps(request.messages_json(), sort_keys=True).encode()).digest()
        prompt = "".join(f"{m.role}: {m.content}\n" for m in request.messages) + "assistant: "
        prompt_ids = self._walker.prompt_ids(prompt)
        stop = tuple(s for s in sampling.stop if s)
        return [
            self._walker.sample(
                random.Random(digest + str(sampling.seed + i).encode()),
                sampling.grammar,
                sampling.max_tokens,
                stop,
                prompt_ids,
            )
            for i in range(sampling.n)
        ]


_WALKERS: dict[tuple[Path, NullSettings], _Walker] = {}
_WALKERS_LOCK = threading.Lock()


def _walker(tokenizer_dir: Path, settings: NullSettings) -> _Walker:
    """This process's walker over ``tokenizer_dir``: every shard's engine shares one tokenizer
    and its compiled grammars (the walk itself keeps no state between samples)."""
    with _WALKERS_LOCK:
        key = (tokenizer_dir.resolve(), settings)
        if key not in _WALKERS:
            from transformers import AutoTokenizer

            from ragfactory.tasks.llm.prompt_tokens import cuts_lines
            from ragfactory.tasks.llm.structured import GrammarMasks
            from ragfactory.tasks.llm.tokenizer_id import tokenizer_fingerprint

            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
            masks = GrammarMasks(tokenizer)
            _WALKERS[key] = _Walker(masks, settings, tokenizer_fingerprint(tokenizer), cuts_lines(tokenizer))
        return _WALKERS[key]


class _Walker:
    """Random walks over one tokenizer's vocabulary, constrained or free."""

    def __init__(self, masks, settings: NullSettings, tokenizer_id: str | None = None, by_lines: bool = False):
        self.masks = masks
        self.settings = settings
        self.tokenizer_id = tokenizer_id
        tokenizer = masks.tokenizer
        # a prompt's ids: its lines' (each tokenized once per process) where the tokenizer allows
        whole = tokenizer.tokenize_str
        self.prompt_ids = LineTokens(whole) if by_lines else lambda text: tuple(whole(text))
        self.eos = tokenizer.eos_token
        self.normal = [t for t in range(masks.vocab_size) if not tokenizer.is_special_token(t)]
        # one token per closing character: the grammar accepts any tokenization of a literal
        self.closing = [self.eos] + [t for c in CLOSING_CHARS for t in tokenizer.tokenize_str(c)[:1]]

    def sample(
        self,
        rng: random.Random,
        grammar: Grammar | None,
        max_tokens: int,
        stop: tuple[str, ...],
        prompt_ids: tuple[int, ...],
    ) -> Completion:
        if grammar is None:
            tokens, finish = self._free(rng, max_tokens)
        else:
            tokens, finish = self._constrained(rng, grammar, max_tokens)
        text = self.masks.tokenizer.decode_str([t for t in tokens if t != self.eos])
        cuts = [text.find(s) for s in stop if s in text]
        if cuts:
            text, finish = text[: min(cuts)], "stop"
        return Completion(
            text=text,
            finish_reason=finish,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(tokens),
            prompt_token_ids=prompt_ids,
            completion_token_ids=tuple(tokens),
            tokenizer_fingerprint=self.tokenizer_id,
        )

    def _free(self, rng: random.Random, max_tokens: int) -> tuple[list[int], str]:
        tokens: list[int] = []
        while len(tokens) < max_tokens:
            if rng.random() < self.settings.close_rate:
                return tokens + [self.eos], "stop"
            tokens.append(self._random_token(rng))
        return tokens, "length"

    def _constrained(self, rng: random.Random, grammar: Grammar, max_tokens: int) -> tuple[list[int], str]:
        matcher = self.masks.matcher(grammar)
        tokens: list[int] = []
        while len(tokens) < max_tokens and not matcher.is_stopped():
            step = matcher.compute_ff_tokens()[: max_tokens - len(tokens)] or [self._draw(rng, matcher)]
            if not matcher.consume_tokens(step):
                raise RuntimeError(
                    f"grammar {grammar.name!r} refused a token its own mask allowed: {matcher.get_error()}"
                )
            tokens += step
        return tokens, "stop" if matcher.is_stopped() else "length"

    def _draw(self, rng: random.Random, matcher) -> int:
        """A token ``matcher`` allows: one closing a free-text field with probability
        ``close_rate``, else any. Single tokens are checked one by one (a microsecond each): a
        whole mask costs 20-200 us and is computed only where few tokens are allowed."""
        if rng.random() < self.settings.close_rate:
            closing = self._closing(rng, matcher)
            if closing is not None:
                return closing
        for _ in range(self.settings.tries):  # free text allows most tokens: a few tries find one
            token = self._random_token(rng)
            if matcher.validate_tokens([token]):
                return token
        mask = np.zeros(self.masks.words, dtype=np.int32)
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, self.masks.words * 4)
        words = np.flatnonzero(mask)  # unpack only the words with an allowed token
        bits = np.unpackbits(mask[words].view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
        rows, cols = np.nonzero(bits)
        allowed = words[rows] * 32 + cols
        return int(allowed[rng.randrange(len(allowed))])

    def _closing(self, rng: random.Random, matcher) -> int | None:
        """An allowed closing token after which the grammar leaves free text, tried in a random
        order; None when none does (a newline inside free text is no closing)."""
        candidates = [t for t in self.closing if matcher.validate_tokens([t])]
        rng.shuffle(candidates)
        for token in candidates:
            if token == self.eos:
                return token
            probe = matcher.deep_copy()  # no rollback past a max_tokens lexeme
            probe.consume_token(token)
            if not any(probe.validate_tokens([self._random_token(rng)]) for _ in range(PROBES)):
                return token
        return None

    def _random_token(self, rng: random.Random) -> int:
        return self.normal[rng.randrange(len(self.normal))]


def null_fingerprint(tokenizer_dir: Path, settings: NullSettings) -> str:
    """The engine's id: its version, settings and tokenizer files; never a real model's."""
    digest = hashlib.sha256(json.dumps({"engine": NULL_VERSION, **settings.__dict__}, sort_keys=True).encode())
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        path = tokenizer_dir / name
        if path.is_file():
            digest.update(name.encode() + path.read_bytes())
    return f"null/{tokenizer_dir.name}/{digest.hexdigest()[:16]}"


def make_null_backend(role, cache_dir: Path | None) -> NullBackend:
    """The engine ``backend: null`` names: the role's model gives the tokenizer (``embedded``, or
    a checkpoint folder); ``options`` are ``NullSettings`` fields."""
    from ragfactory.tasks.llm.embedded import resolve_model

    unknown = sorted(set(role.options) - set(NullSettings.__dataclass_fields__))
    if unknown:
        raise ValueError(
            f"llm options {unknown} are not settings of the null backend; "
            f"known: {sorted(NullSettings.__dataclass_fields__)}"
        )
    return NullBackend(resolve_model(role.model, cache_dir), NullSettings(**role.options))
