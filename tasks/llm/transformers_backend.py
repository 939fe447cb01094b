"""The embedded engine: batched chat generation with transformers on CPU or one GPU.

docs/architecture.md, "Core contracts": a Backend, or with ``continuous`` a ContinuousBackend.
Prompts are rendered with the model's chat template and decoded by one thread's running batch
(``tasks/llm/running_batch.py``): rows join it as room frees, from the call that brought them or
any later one, and each call is answered as its own rows finish. Each row samples with its own
``torch.Generator`` seeded from the request seed plus the sample index (``n`` samples become
``n`` rows), so a row's random draws never depend on its batch-mates.
``generate(do_sample=True)`` would share one global RNG across the batch and break that. Temperature
0 is greedy; ``top_p`` keeps the smallest head of the sorted distribution whose mass reaches it;
every row has its own ``max_tokens`` and stop strings (checked on the decoded tail, cut from the
text, OpenAI-style); finished rows leave the batch so long answers do not hold short ones back.

Memory is bounded by the running batch, not only by its row count: rows join it while its KV
cache (rows x padded width x bytes per token) fits ``kv_cache_mb``, and its prefill goes through
the model in groups of ``prefill_tokens`` padded tokens (``tasks/llm/decode_memory.py``), so
calls of any size hold one batch's memory. Prefill is ``tasks/llm/prefill.py``: every
prompt from its first token, or, with ``prefix_reuse``, shared prefixes once and stored ones not
again (docs/engine.md, "Prefix reuse"); ``prefill_counts`` says how many prompt tokens it computed.

What cannot be promised: batched float math (padding, another batch width, prefill on two
threads) can change logits in the last bits, so a row's text equals the same row decoded alone
only up to numerical ties. For greedy decoding that means exactly equal but for near-tied
logits; a sampled row shares its random stream, so it diverges only where such a tie flips a
token.

Every completion carries its prompt's and its sampled token ids, each sampled token's
log-probability under the distribution it was drawn from (``sampling.py``) and the tokenizer's
fingerprint (docs/tokens.md), so a trainer never re-tokenises what the engine produced.

The model loads lazily on the first batch: a rebuild answered from the cache never pays for it.
``fingerprint`` is computed from the checkpoint files (content sampled, not read whole, so it
costs milliseconds even for multi-GB weights: a fine-tune changes every sampled chunk), the dtype
and the decode-loop version; the device is left out, as CPU and GPU compute the same model.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragfactory.memory import tune_allocator
from ragfactory.tasks.llm.decode_memory import kv_bytes_per_token, kv_token_slots, sized_for
from ragfactory.tasks.llm.device import cpu_threads, default_device, engine_threads, resolve_dtype
from ragfactory.tasks.llm.half_attention import use_half_attention
from ragfactory.tasks.llm.kv_buffers import grouped_query_attention
from ragfactory.tasks.llm.prefill import PrefillCounts, Prefiller
from ragfactory.tasks.llm.running_batch import DecodeLoop
from ragfactory.tasks.llm.sampling import sample_tokens
from ragfactory.tasks.llm.tokenizer_id import tokenizer_fingerprint
from ragfactory.tasks.llm.types import Completion, Grammar, Request

__all__ = ["TransformersBackend", "TransformersSettings", "checkpoint_fingerprint", "sample_tokens"]

_log = logging.getLogger(__name__)
DECODE_VERSION = "rowseed-v1"  # bump when the decode loop changes what it samples


@dataclass(frozen=True)
class TransformersSettings:
    """Engine settings of the transformers backend."""

    device: str | None = None  # None: cuda when available, else cpu
    # auto: bfloat16 on GPU; float32 on CPU: the tests' and demo's exact tokens, and a fine-tune's small
    # weight changes kept. bfloat16 on a CPU with bf16 instructions: 2-2.6x faster (tasks/llm/half_attention.py).
    dtype: str = "auto"
    # Rows per forward pass and the running batch's KV in MB; None: the device's (decode_memory.py
    # device_budget): 32 rows and 256 MB on CPU (~5 rows of a 1,000-token prompt for SmolLM2-135M in
    # float32, 46 KB a token), 256 rows and a quarter of the free memory up to 8 GiB on CUDA.
    max_batch_size: int | None = None
    kv_cache_mb: float | None = None
    prefill_tokens: int = 4096  # padded prompt tokens per prefill pass: bounds the attention scores
    stop_tail_tokens: int = 8  # extra tokens decoded beyond the longest stop string's length
    # Prefill prompts' shared prefixes once and keep prefixes for later calls (tasks/llm/prefill.py):
    # the same tokens up to float ties (docs/engine.md). None: on where the model attends to the whole
    # prompt in every layer; true: required (an error where it cannot be); false: all prefilled.
    prefix_reuse: bool | None = None
    # The plain running batch's KV in buffers reserved once, written in place (tasks/llm/kv_buffers.py):
    # no per-step copy and its page faults, bit for bit; off: transformers' growing cache.
    kv_buffers: bool = True
    # SDPA on the model's own KV heads on CPU (no copy per query head): about 3x less decode CPU
    # with kv_buffers, the same tokens but log-probs within ~2e-5, not bit for bit (docs/engine.md).
    gqa_attention: bool = True
    threads: int | None = None  # torch's intra-op threads of an engine call on CPU; None: half torch's
    # intra-op threads of prefill on CPU; None: torch's (half the time quiet, 1.3x busy: docs/engine.md)
    prefill_threads: int | None = None
    # Take requests as questions issue them (a ContinuousBackend; tasks/llm/running_batch.py); off: no
    # faster on CPU, and lock-step calls fix which rows ride together (docs/engine.md).
    continuous: bool = False
    # Rows of one prompt hold its keys and values once in decode (tasks/llm/shared_kv.py): 8 samples of
    # a prompt 2.6x faster, but a row's last bits depend on its group's size (docs/engine.md).
    shared_prefixes: bool = False
    unpadded_kv: bool = False  # each row's KV in a buffer of its own width (tasks/llm/unpadded_kv.py)

    def __post_init__(self):
        if (self.kv_cache_mb is not None and not self.kv_cache_mb > 0) or self.prefill_tokens < 1:
            raise ValueError(
                f"transformers options kv_cache_mb must be > 0 and prefill_tokens >= 1, "
                f"got {self.kv_cache_mb} and {self.prefill_tokens}"
            )


@dataclass
class _Row:
    """One sequence being decoded: one sample of one request."""

    request_index: int
    sample_index: int
    prompt: list[int]
    seed: int
    temperature: float
    top_p: float
    max_tokens: int
    stop: tuple[str, ...]
    grammar: Grammar | None = None
    matcher: Any = None  # the row's llguidance matcher while it decodes under ``grammar``
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # of each sampled token (sampling.py)
    finish_reason: str = ""
    latency_s: float = 0.0
    started: float = 0.0  # when it joined the running batch
    call: Any = None  # the engine call it belongs to (tasks/llm/running_batch.py)


class TransformersBackend:
    """A ``Backend`` over a local checkpoint folder (or a model id in the local HF cache)."""

    def __init__(self, model: str | Path, settings: TransformersSettings = TransformersSettings()):
        self.model_ref = str(model)
        self.device = settings.device or default_device()
        self.settings = settings = sized_for(settings, self.device)
        self.dtype = resolve_dtype(settings.dtype, self.device)
        self.fingerprint = checkpoint_fingerprint(self.model_ref, self.dtype)
        self._model = None
        self._threads = 1  # intra-op threads of its calls on CPU, set at load (``engine_threads``)
        self._prefill_threads = 1  # and of their prefill
        self._tokenizer = None
        self.tokenizer_fingerprint: str | None = None  # computed at load, with the tokenizer
        self._eos_ids: frozenset[int] = frozenset()
        self._pad_id = 0
        self._masks = None  # GrammarMasks, built with the first constrained row
        self._cache_arg = "cache"  # the name forward() gives the KV cache, read at load
        self._prefiller: Prefiller | None = None  # made at load, with the model
        self._lock = threading.Lock()  # loads and tokenizes once at a time, from any thread
        self.continuous = settings.continuous  # scheduled as a ContinuousBackend (types.py)
        self._decoder = DecodeLoop(self)  # the one thread that runs the model
        self._computed: OrderedDict[int, int] = OrderedDict()  # recent calls' prefilled tokens

    def __repr__(self) -> str:
        return f"TransformersBackend({self.model_ref!r}, device={self.device!r}, dtype={self.dtype!r})"

    def load(self) -> None:
        """Load tokenizer and model now (otherwise the first batch does)."""
        if self._model is not None:
            return
        with self._lock:
            if self._model is None:
                self._load()

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        tune_allocator()  # a step reuses the pages the step before it freed; each call gives them back
        self._threads = engine_threads(self.settings.threads)  # before any call of ours sets it
        self._prefill_threads = self.settings.prefill_threads or torch.get_num_threads()
        tokenizer = AutoTokenizer.from_pretrained(self.model_ref)
        dtype = getattr(torch, self.dtype)
        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a one-second bar per shard, in the middle of the build's log
        try:
            model = AutoModelForCausalLM.from_pretrained(self.model_ref, dtype=dtype)
        finally:
            if bar:
                hf_logging.enable_progress_bar()
        eos = {tokenizer.eos_token_id}
        configured = getattr(model.generation_config, "eos_token_id", None)
        eos.update(configured if isinstance(configured, list) else [configured])
        self._eos_ids = frozenset(i for i in eos if i is not None)
        pad = tokenizer.pad_token_id
        self._pad_id = pad if pad is not None else min(self._eos_ids)
        self._tokenizer, self._model = tokenizer, model.to(self.device).eval()
        use_half_attention(self._model, self.device)  # SDPA's one-token path is slow in bf16 on CPU
        self.tokenizer_fingerprint = tokenizer_fingerprint(tokenizer)
        # transformers renamed forward's past_key_values to cache (5.x warns on the old name)
        params = inspect.signature(type(model).forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        token_bytes = kv_bytes_per_token(model.config, self.dtype)
        self._prefiller = Prefiller(self._model, self._cache_arg, self._pad_id, self.device, self.settings, token_bytes)

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        answers, computed = self._decoder.submit(requests).result()
        self._counted(requests, answers, computed)
        return answers

    async def agenerate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        """The same, awaited: the call's rows join the running batch at once (``continuous``)."""
        answers, computed = await asyncio.wrap_future(self._decoder.submit(requests))
        self._counted(requests, answers, computed)
        return answers

    def computed_tokens(self, requests: list[Request]) -> int:
        """The prompt tokens prefill computed for the call of ``requests`` (this very list), once."""
        with self._lock:
            return self._computed.pop(id(requests), 0)

    def _counted(self, requests: list[Request], answers: list[list[Completion]], computed: int) -> None:
        with self._lock:
            self._computed[id(requests)] = computed
            while len(self._computed) > 1024:  # a caller that never asks
                self._computed.popitem(last=False)
        counts = self._prefiller.counts  # the latest answered call's, for a caller that waited on it
        counts.last_prompt_tokens = sum(c.prompt_tokens for a in answers for c in a)
        counts.last_computed_tokens = computed

    def start_call(self, requests: list[Request]) -> list[_Row]:
        """An engine call's rows (its prompts encoded), its shared prefixes prefilled (on the decoder)."""
        rows = [row for i, request in enumerate(requests) for row in _rows(i, request, self)]
        with self.prefilling():
            self._prefiller.start_call([r.prompt for r in rows])
        return rows

    def prefilling(self):
        """The threads prefill computes on (the decoder's thread, within ``computing``)."""
        return cpu_threads(self._prefill_threads) if self.device == "cpu" else contextlib.nullcontext()

    def answers(self, requests: list[Request], rows: list[_Row]) -> list[list[Completion]]:
        """The call's completions, per request in sample order."""
        answers: list[list[Completion | None]] = [[None] * r.sampling.n for r in requests]
        for row in rows:
            answers[row.request_index][row.sample_index] = self._completion(row)
        return answers  # type: ignore[return-value]

    @contextlib.contextmanager
    def computing(self) -> Iterator[None]:
        """How the decoder's thread runs the model: no autograd, the engine's CPU threads and
        attention."""
        import torch

        cpu = self.device == "cpu"
        gqa = grouped_query_attention(self.settings.gqa_attention and cpu)
        threads = cpu_threads(self._threads) if cpu else contextlib.nullcontext()
        with torch.inference_mode(), gqa, threads:
            yield

    @property
    def kv_slots(self) -> int:
        """Tokens (rows x padded width) the running batch's KV cache may hold."""
        return kv_token_slots(self.settings.kv_cache_mb, self.kv_token_bytes)

    @property
    def prefill_counts(self) -> PrefillCounts:
        """Prompt tokens against prefilled tokens, over this engine's calls and in its latest."""
        self.load()
        return self._prefiller.counts

    @property
    def kv_token_bytes(self) -> int:
        """Bytes one token takes in the KV cache of the loaded model (keys and values, every layer)."""
        self.load()
        return kv_bytes_per_token(self._model.config, self.dtype)

    def encode_prompt(self, request: Request) -> list[int]:
        """Token ids of the chat-templated prompt, ending with the assistant turn's header."""
        self.load()
        tokenizer = self._tokenizer
        messages = request.messages_json()
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        else:  # a base model: plain role-prefixed lines
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        with self._lock:
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def _start_matchers(self, rows: list[_Row]) -> None:
        if any(r.grammar is not None for r in rows) and self._masks is None:
            from ragfactory.tasks.llm.structured import GrammarMasks

            self._masks = GrammarMasks(self._tokenizer)
        for row in rows:
            row.matcher = self._masks.matcher(row.grammar) if row.grammar is not None else None

    def _mask(self, logits, live: list[_Row]) -> None:
        """Logits of the tokens a constrained row's grammar forbids next become -inf."""
        constrained = [k for k, row in enumerate(live) if row.matcher is not None]
        if constrained:
            self._masks.mask_logits(logits, constrained, [live[k].matcher for k in constrained])

    def _advance(self, row: _Row, token: int, logprob: float, started: float) -> bool:
        """Append a sampled token and its log-probability; True when the row is finished."""
        row.tokens.append(token)
        row.logprobs.append(logprob)
        if row.matcher is not None and not row.matcher.consume_token(token):
            raise RuntimeError(
                f"grammar {row.grammar.name!r} refused a token its own mask allowed: {row.matcher.get_error()}"
            )
        if token in self._eos_ids or (row.matcher is not None and row.matcher.is_stopped()):
            row.finish_reason = "stop"
        elif row.stop and self._tail_has_stop(row):
            row.finish_reason = "stop"
        elif len(row.tokens) >= row.max_tokens:
            row.finish_reason = "length"
        else:
            return False
        row.latency_s = time.perf_counter() - started
        return True

    def _tail_has_stop(self, row: _Row) -> bool:
        window = max(len(s) for s in row.stop) + self.settings.stop_tail_tokens
        tail = self._tokenizer.decode(row.tokens[-window:], skip_special_tokens=True)
        return any(s in tail for s in row.stop)

    def _completion(self, row: _Row) -> Completion:
        tokens = row.tokens[:-1] if row.tokens and row.tokens[-1] in self._eos_ids else row.tokens
        text = self._tokenizer.decode(tokens, skip_special_tokens=True)
        finish = row.finish_reason
        cuts = [text.find(s) for s in row.stop if s in text]
        if cuts:
            text, finish = text[: min(cuts)], "stop"
        return Completion(
            text=text,
            finish_reason=finish,
            prompt_tokens=len(row.prompt),
            completion_tokens=len(row.tokens),
            latency_s=row.latency_s,
            prompt_token_ids=tuple(row.prompt),
            completion_token_ids=tuple(row.tokens),
            completion_logprobs=tuple(row.logprobs),
            tokenizer_fingerprint=self.tokenizer_fingerprint,
        )


def checkpoint_fingerprint(model_ref: str, dtype: str, chunks: int = 16, chunk_bytes: int = 1 << 16) -> str:
    """An id of the weights and settings that shape outputs, cheap for any checkpoint size."""
    digest = hashlib.sha256(json.dumps({"decode": DECODE_VERSION, "dtype": dtype}).encode())
    folder = _local_folder(model_ref)
    if folder is None:  # a hub id we cannot see locally: the id is all we know
        digest.update(model_ref.encode())
        return f"transformers/{model_ref}/{dtype}/{digest.hexdigest()[:16]}"
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
        size = path.stat().st_size
        digest.update(f"{path.name}:{size}".encode())
        with path.open("rb") as handle:
            if size <= chunks * chunk_bytes:
                digest.update(handle.read())
                continue
            for k in range(chunks):
                handle.seek((size - chunk_bytes) * k // (chunks - 1))
                digest.update(handle.read(chunk_bytes))
    return f"transformers/{folder.name}/{dtype}/{digest.hexdigest()[:16]}"


def _rows(index: int, request: Request, backend: TransformersBackend) -> list[_Row]:
    sampling = request.sampling
    if sampling.n < 1 or sampling.max_tokens < 1:
        raise ValueError(
            f"request {index}: n and max_tokens must be >= 1, got n={sampling.n}, max_tokens={sampling.max_tokens}"
        )
    prompt = backend.encode_prompt(request)
    return [
        _Row(
            index,
            i,
            prompt,
            sampling.seed + i,
            sampling.temperature,
            sampling.top_p,
            sampling.max_tokens,
            tuple(s for s in sampling.stop if s),
            sampling.grammar,
        )
        for i in range(sampling.n)
    ]


def _local_folder(model_ref: str) -> Path | None:
    path = Path(model_ref).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_ref, local_files_only=True))
    except Exception:  # not a hub id, or not in the local cache
        return None
