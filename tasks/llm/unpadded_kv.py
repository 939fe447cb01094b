"""The running batch's keys and values with each row in a buffer of its own width: no padding.

The plain running batch (``tasks/llm/running_batch.py``) holds one tensor a layer of rows x
(widest row + longest remaining ``max_tokens``): every row is left-padded to the widest one, so
the KV budget pays for the padding and every step's attention reads it. A night's prompts run
from about 90 to 1,350 tokens (450 on average), so a batch of one long prompt and short ones is
mostly padding. ``UnpaddedCache`` gives each row one buffer for the keys and values of every
layer, as wide as the row needs (its prompt plus its ``max_tokens``)::

    padded (rows x widest)           unpadded (a buffer a row)
    row 0  [0 0 0 0 p p t t . .]     row 0  [p p t t . .]
    row 1  [p p p p p p t t . .]     row 1  [p p p p p p t t . .]
    row 2  [0 0 0 p p p t . . .]     row 2  [p p p t . . .]

A step writes each row's new keys and values into its own next slot, and ``unpadded_attention``
attends each row over its own filled slots (SDPA, one call a row and layer). The budget is the
sum of the rows' own widths, not rows x widest; a row that finishes frees its buffer without a
copy of the others'; a joining row's prefilled keys and values are copied once into its buffer.

What it costs: an attention call a row and layer instead of one a layer (Python's overhead grows
with the rows), and a row's attention sums over its own slots, not over a padded width, so its
last bits move as another batch width moves them (a token only at a float tie);
``tests/llm/test_unpadded_kv.py`` bounds both.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ragfactory.tasks.llm.half_attention import one_token_attention
from ragfactory.tasks.llm.running_batch import RunningBatch, attends_whole_prompts, decode_step

NAME = "ragfactory_unpadded"


class UnpaddedRunningBatch(RunningBatch):
    """A running batch whose rows each hold a buffer of their own width: the budget is the sum
    of the rows' prompt and ``max_tokens`` slots, not rows x widest, and a row that finishes
    frees its buffer without a copy."""

    def __init__(self, engine: Any, slots: int, max_rows: int):
        super().__init__(engine, slots, max_rows)
        register()

    def take(self, waiting: deque) -> list:
        """Rows from the head of ``waiting`` while the rows' own slots (prompt + ``max_tokens``)
        fit the budget."""
        used = sum(map(_capacity, self.rows))
        taken: list = []
        while waiting:
            row = waiting[0]
            need, count = _capacity(row), len(self.rows) + len(taken) + 1
            if count > 1 and (count > self.max_rows or used + need > self.slots):
                break
            taken.append(waiting.popleft())
            used += need
        return taken

    def _prefill(self, rows: list):
        """Each row's logits and its buffer, prefilled a part at a time: a part's distinct prompts
        padded to its widest hold at most ``prefill_tokens`` slots (one prompt at least), so the
        padded cache a prefill returns stays that small however many rows the budget admits."""
        import torch

        logits, buffers = [], []
        for part in _parts(rows, self.engine.settings.prefill_tokens):
            first, _, cache, index = self.engine._prefiller.prefill_distinct(part)
            index = index.tolist()
            buffers += row_buffers(cache, index, [len(r.prompt) for r in part], [_capacity(r) for r in part])
            logits.append(first[index])
            del cache
        return torch.cat(logits), None, buffers

    def _join(self, rows: list, logits, mask, buffers) -> None:
        if self._cache is None:
            self._cache = UnpaddedCache(buffers[0].shape[0])
        self._cache.add(buffers, [len(r.prompt) for r in rows])

    def _keep(self, index) -> None:
        self._cache.keep(index.tolist())

    def _forward(self, tokens):
        cache = self._cache
        cache.start_step(max(1, self.engine.settings.stop_tail_tokens))
        logits = decode_step(self.engine, self.rows, tokens, cache, NAME)
        cache.advance()
        return logits


def _capacity(row) -> int:
    """A row's buffer: its prompt and every token it may generate."""
    return len(row.prompt) + max(1, row.max_tokens)


def _parts(rows: list, slots: int) -> list[list]:
    """``rows`` in order, cut where a part's distinct prompts x its widest would pass ``slots``."""
    parts: list[list] = []
    prompts: set = set()
    width = 0
    for row in rows:
        key, wider = tuple(row.prompt), max(width, len(row.prompt))
        if parts and key not in prompts and (len(prompts) + 1) * wider > slots:
            parts.append([])
            prompts, wider = set(), len(row.prompt)
        if not parts:
            parts.append([])
        parts[-1].append(row)
        prompts.add(key)
        width = wider
    return parts


def row_buffers(arriving, index: list[int], lengths: list[int], capacities: list[int]) -> list:
    """A buffer a row, ``capacities[r]`` slots wide, holding the ``lengths[r]`` prompt slots of
    ``arriving``'s row ``index[r]`` (a prefilled cache of distinct prompts, left-padded)."""
    first = arriving.layers[0].keys
    width, buffers = first.shape[2], []
    for source, length, capacity in zip(index, lengths, capacities, strict=True):
        buffer = first.new_empty((len(arriving.layers), 2, first.shape[1], capacity, first.shape[3]))
        for i, layer in enumerate(arriving.layers):
            buffer[i, 0, :, :length].copy_(layer.keys[source, :, width - length :])
            buffer[i, 1, :, :length].copy_(layer.values[source, :, width - length :])
        buffers.append(buffer)
    return buffers


class UnpaddedLayer:
    """One layer of an ``UnpaddedCache``: ``update`` writes a step into every row's buffer."""

    def __init__(self, owner: UnpaddedCache, index: int):
        self.owner, self.index = owner, index

    def update(self, key_states, value_states, *args, **kwargs):
        """Write each row's keys and values for this step at its next slot; attention reads this layer."""
        import torch

        step = torch.stack((key_states[:, :, -1], value_states[:, :, -1]), dim=1)  # rows x 2 x heads x dim
        for writes, row in zip(self.owner.writes, step.unbind(0), strict=True):
            writes[self.index].copy_(row)
        return self, None


class UnpaddedCache:
    """The KV cache of a running batch whose rows each hold a buffer of ``layers x 2 (keys,
    values) x KV heads x slots x head size``; ``slots[r]`` is the slot row ``r`` writes next."""

    is_compileable = False

    def __init__(self, layers: int):
        self.layers = [UnpaddedLayer(self, i) for i in range(layers)]
        self.buffers: list = []
        self.slots: list[int] = []
        self.writes: list = []  # a row's layers' [2, heads, dim] views of this step's slot
        self.reads: list = []  # a row's layers' keys and values, [1, heads, filled + 1, dim] each

    def add(self, buffers: list, slots: list[int]) -> None:
        """Rows joining: their buffers (``row_buffers``) and each one's prompt slots filled."""
        self.buffers += buffers
        self.slots += slots

    def keep(self, rows: list[int]) -> None:
        """Keep the rows ``rows``: the others' buffers are freed, none is copied."""
        self.buffers = [self.buffers[r] for r in rows]
        self.slots = [self.slots[r] for r in rows]

    def start_step(self, extra: int) -> None:
        """Before a step: rows past their buffer widened by ``extra`` slots, and each row's views
        a layer (made once a step, not once a layer): the slot it writes, and the slots it
        attends to (its filled ones and that one)."""
        self.widen(extra)
        self.writes = [buffer[:, :, :, slot].unbind(0) for buffer, slot in zip(self.buffers, self.slots, strict=True)]
        self.reads = [
            (buffer[:, 0, None, :, : slot + 1].unbind(0), buffer[:, 1, None, :, : slot + 1].unbind(0))
            for buffer, slot in zip(self.buffers, self.slots, strict=True)
        ]

    def advance(self) -> None:
        """Every row has written the slot of the step just taken; the step's views go (they
        would hold a finished row's buffer past its leaving)."""
        self.slots = [slot + 1 for slot in self.slots]
        self.writes, self.reads = [], []

    def widen(self, extra: int) -> None:
        """Rows whose next slot is past their buffer get ``extra`` more slots (a row decoding past
        its ``max_tokens``, which the batch's budget does not plan for)."""
        import torch

        for r, (buffer, slot) in enumerate(zip(self.buffers, self.slots, strict=True)):
            if slot >= buffer.shape[3]:
                shape = list(buffer.shape)
                shape[3] = extra
                self.buffers[r] = torch.cat([buffer, buffer.new_zeros(shape)], dim=3)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.slots, default=0)

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        return self.layers[layer_idx].update(key_states, value_states)

    def __len__(self) -> int:
        return len(self.layers)


def unpadded_attention(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0, **kwargs):
    """Attention of one token a row over that row's own filled slots (module docstring); any
    other call goes to SDPA as the model's own attention would."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not isinstance(key, UnpaddedLayer):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if not attends_whole_prompts(kwargs):
        raise ValueError("unpadded_kv attends to whole prompts without softcap or sinks; this model needs more")
    i, cache = key.index, key.owner
    grouped = query.shape[1] != cache.buffers[0].shape[2]
    half = query.device.type == "cpu" and query.dtype != torch.float32  # SDPA's slow case (half_attention.py)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = [
        one_token_attention(q, keys[i], values[i], None, scaling)
        if half
        else sdpa(q, keys[i], values[i], scale=scaling, enable_gqa=grouped)
        for q, (keys, values) in zip(query[:, :, -1:].split(1), cache.reads, strict=True)
    ]
    return torch.cat(out).transpose(1, 2), None


def register() -> None:
    """Make ``unpadded_attention`` an attention implementation transformers can name."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, unpadded_attention)
