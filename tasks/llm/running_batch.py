"""The embedded engine's decode loop: one thread, one running batch, rows joining as room frees.

``DecodeLoop`` is the only thread that runs the transformers engine's model (``tasks/llm/
transformers_backend.py``). Engine calls (``submit``) queue their rows; the loop admits rows
from the head of the queue whenever they fit beside the rows it is decoding, prefills them
(``tasks/llm/prefill.py``) and merges their KV cache into the running one; every step samples
one token per row and drops the rows that finished. A call is answered the moment its last
row finishes, while the others go on::

    call A (3 rows) --+                      running batch (one forward pass a step)
    call B (1 row) ---+--> waiting queue --> [A0 A1 A2 B0]   A1 done -> [A0 A2 B0 C0 C1]
    call C (2 rows) --+    (FIFO; a call's     admit while    C admitted into the room A1 left;
                           rows shortest       rows x width   B answered when B0 finishes
                           prompt first)       fits the KV budget

What a row may hold is the ``RunningBatch`` budget: at most ``max_rows`` rows, and rows x
(widest filled or prompt width + longest remaining ``max_tokens``) within the ``kv_cache_mb``
slots, the same bound a static chunk had; a lone row is admitted whatever its width. Admitting
costs one copy of the running cache (``merged_cache``); a finished row costs one copy too, which
also drops the leading slots only finished rows used.

What it cannot promise: a row's numbers depend on the batch it rides in (its width, its
mates) in the last bits, as a static chunk's did, and which rows ride together now depends on
when calls arrive. So outputs are the static engine's up to float ties, and two runs of a
continuous build may part at such a tie; a call answered from the call cache never does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ragfactory.memory import release_free_memory
from ragfactory.tasks.llm.kv_buffers import merged_cache, select_rows
from ragfactory.tasks.llm.sampling import sample_tokens, sampled_logprobs

_log = logging.getLogger(__name__)


class RunningBatch:
    """The rows decoded together now: their KV cache, attention mask and next-token logits."""

    def __init__(self, engine: Any, slots: int, max_rows: int):
        self.engine, self.slots, self.max_rows = engine, slots, max_rows
        self.rows: list = []
        self._generators: list = []
        self._cache = self._mask = self._logits = None

    def __len__(self) -> int:
        return len(self.rows)

    def clear(self) -> None:
        """Drop every row and the cache."""
        self.rows, self._generators = [], []
        self._cache = self._mask = self._logits = None

    def take(self, waiting: deque) -> list:
        """Rows from the head of ``waiting`` that fit beside the running ones (popped)."""
        width = self._mask.shape[1] if self.rows else 0
        room = max((r.max_tokens - len(r.tokens) for r in self.rows), default=0)
        taken: list = []
        while waiting:
            row = waiting[0]
            count = len(self.rows) + len(taken) + 1
            wider, longer = max(width, len(row.prompt)), max(room, row.max_tokens)
            if count > 1 and (count > self.max_rows or count * (wider + longer) > self.slots):
                break
            taken.append(waiting.popleft())
            width, room = wider, longer
        return taken

    def admit(self, rows: list) -> int:
        """Prefill ``rows`` and merge them into the batch, their logits ready to sample; the
        prompt tokens the prefill computed."""
        import torch

        engine, now = self.engine, time.perf_counter()
        for row in rows:
            row.started = now
        engine._start_matchers(rows)
        counts = engine._prefiller.counts
        before = counts.computed_tokens
        with engine.prefilling():
            logits, mask, cache = self._prefill(rows)
        computed = counts.computed_tokens - before
        if not self.rows or computed >= engine.settings.prefill_tokens // 16:
            release_free_memory()  # a large prefill's activations leave; a small one's pages are reused
            # (docs/engine.md, "The running batch": every prefill 6 % kernel time, none 3.0 GB)
        self._join(rows, logits, mask, cache)
        self._logits = logits if self._logits is None else torch.cat([self._logits, logits])
        self.rows += rows
        self._generators += [torch.Generator(device=engine.device).manual_seed(r.seed) for r in rows]
        return computed

    def _prefill(self, rows: list):
        """Each row's last-position logits, the left-padded mask and the KV cache of its prompt."""
        return self.engine._prefiller.prefill(rows)

    def _join(self, rows: list, logits, mask, cache) -> None:
        """Merge the prefilled ``rows``' cache and mask into the batch's."""
        import torch

        room = max(r.max_tokens - len(r.tokens) for r in self.rows + rows)
        self._cache = merged_cache(self._cache, cache, room, self.engine.settings.kv_buffers)
        width = self._cache.get_seq_length()
        masks = [m for m in (self._mask, mask) if m is not None]
        self._mask = torch.cat([torch.nn.functional.pad(m, (width - m.shape[1], 0)) for m in masks])

    def step(self) -> list:
        """Sample one token for every row; the rows that finished leave and are returned, the
        others go through the model once."""
        import torch

        engine, rows = self.engine, self.rows
        engine._mask(self._logits, rows)
        scores, temperatures, top_ps = self._logits.float(), [r.temperature for r in rows], [r.top_p for r in rows]
        tokens = sample_tokens(scores, temperatures, top_ps, self._generators)
        logprobs = sampled_logprobs(scores, tokens, temperatures, top_ps).tolist()
        done = [engine._advance(row, int(t), lp, row.started) for row, t, lp in zip(rows, tokens, logprobs)]
        finished = [row for row, over in zip(rows, done) if over]
        keep = [k for k, over in enumerate(done) if not over]
        if not keep:
            self.clear()
            return finished
        if finished:
            index = torch.tensor(keep, device=engine.device)
            tokens = tokens[index]
            self._keep(index)
            self.rows, self._generators = [rows[k] for k in keep], [self._generators[k] for k in keep]
        self._logits = self._forward(tokens)
        return finished

    def _keep(self, index) -> None:
        """Keep the rows ``index`` of the cache and mask, and the slots they use."""
        mask = self._mask[index]
        first = int(mask.any(dim=0).nonzero()[0])  # slots before it held finished rows only
        select_rows(self._cache, index, first)
        self._mask = mask[:, first:]

    def _forward(self, tokens):
        """The next-token logits of every row after ``tokens``."""
        import torch

        engine, mask = self.engine, self._mask
        self._mask = mask = torch.cat([mask, mask.new_ones((len(tokens), 1))], dim=-1)
        return engine._model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=mask.sum(-1, keepdim=True) - 1,
            use_cache=True,
            **{engine._cache_arg: self._cache},
        ).logits[:, -1, :]


def batch_kind(settings) -> type[RunningBatch]:
    """The running batch the engine's settings name: padded, shared prefixes or unpadded rows."""
    from ragfactory.tasks.llm.shared_kv import SharedRunningBatch  # they subclass RunningBatch
    from ragfactory.tasks.llm.unpadded_kv import UnpaddedRunningBatch

    if settings.unpadded_kv:
        return UnpaddedRunningBatch
    return SharedRunningBatch if settings.shared_prefixes else RunningBatch


def attends_whole_prompts(kwargs: dict) -> bool:
    """Whether an attention call reads every slot plainly (no sliding window, softcap or sinks):
    what the shared, unpadded and half-precision decode attentions compute."""
    return all(kwargs.get(name) is None for name in ("sliding_window", "softcap", "s_aux"))


def decode_step(engine: Any, rows: list, tokens, cache, attention: str):
    """One forward pass of ``tokens`` (a token a row) over ``cache`` with the model's attention
    named ``attention`` (a cache of the shape only that attention reads): the next logits."""
    import torch

    positions = torch.tensor([[len(r.prompt) + len(r.tokens) - 1] for r in rows], device=engine.device)
    config = engine._model.config
    implementation, config._attn_implementation = config._attn_implementation, attention
    try:
        return engine._model(
            input_ids=tokens[:, None],
            attention_mask=torch.ones((len(tokens), 1, 1, 1), dtype=torch.bool, device=engine.device),
            position_ids=positions,
            use_cache=True,
            **{engine._cache_arg: cache},
        ).logits[:, -1, :]
    finally:
        config._attn_implementation = implementation


@dataclass(eq=False)
class _Call:
    """One engine call: its requests, their rows, the future its caller waits on."""

    requests: list
    future: Future
    rows: list = field(default_factory=list)
    left: int = 0  # rows not finished yet
    computed: float = 0.0  # prompt tokens its prefill computed (a shared pass split by prompt length)


class DecodeLoop:
    """The thread that decodes every call of one engine (started with the first call, ended
    when nothing waits or runs); ``submit`` returns a future of the call's rows' completions."""

    def __init__(self, engine: Any):
        self.engine = engine
        self._inbox: list[_Call] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._taken: list = []  # rows being admitted: their calls fail with the batch

    def submit(self, requests: list) -> Future:
        """Queue an engine call; its future gives ``(completions per request, computed tokens)``."""
        call = _Call(list(requests), Future())
        with self._cond:
            self._inbox.append(call)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="llm-decode", daemon=True)
                self._thread.start()
        return call.future

    def _serve(self) -> None:
        engine = self.engine
        try:
            engine.load()
        except BaseException as exc:  # no model: every queued call hears why, the next one tries again
            with self._cond:
                calls, self._inbox, self._thread = self._inbox, [], None
            for call in calls:
                call.future.set_exception(exc)
            return
        kind = batch_kind(engine.settings)
        batch, waiting = kind(engine, engine.kv_slots, engine.settings.max_batch_size), deque()
        with engine.computing():
            while True:
                with self._cond:
                    calls, self._inbox = self._inbox, []
                    if not calls and not waiting and not batch:
                        self._thread = None
                        release_free_memory()  # the calls' freed activations leave
                        return
                try:
                    self._turn(calls, batch, waiting)
                except BaseException as exc:  # fail the calls in the batch, not the thread
                    _log.debug("decode step failed", exc_info=True)
                    failed = {id(r.call): r.call for r in batch.rows + self._taken}
                    batch.clear()
                    for call in failed.values():  # their waiting rows leave at the next turn
                        if not call.future.done():
                            call.future.set_exception(exc)

    def _turn(self, calls: list[_Call], batch: RunningBatch, waiting: deque) -> None:
        """New calls queue their rows; what fits joins the batch; the batch takes one step."""
        counts = self.engine._prefiller.counts
        for call in calls:
            before = counts.computed_tokens
            try:
                call.rows = self.engine.start_call(call.requests)
            except Exception as exc:  # a bad request fails its own call
                call.future.set_exception(exc)
                continue
            call.computed, call.left = counts.computed_tokens - before, len(call.rows)
            for row in call.rows:
                row.call = call
            waiting.extend(sorted(call.rows, key=lambda r: len(r.prompt)))
            if not call.rows:
                self._answer(call)
        if any(row.call.future.done() for row in waiting):  # calls that failed or were given up
            kept = [row for row in waiting if not row.call.future.done()]
            waiting.clear()
            waiting.extend(kept)
        self._taken = batch.take(waiting)
        if self._taken:
            share = batch.admit(self._taken) / sum(len(r.prompt) for r in self._taken)
            for row in self._taken:
                row.call.computed += share * len(row.prompt)
        self._taken = []
        for row in batch.step() if batch else ():
            row.call.left -= 1
            if not row.call.left:
                self._answer(row.call)

    def _answer(self, call: _Call) -> None:
        if call.future.done():  # its caller gave up
            return
        try:
            call.future.set_result((self.engine.answers(call.requests, call.rows), round(call.computed)))
        except Exception as exc:
            call.future.set_exception(exc)
