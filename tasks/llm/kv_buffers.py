"""The running batch's KV cache in buffers reserved once, written in place at every step.

transformers' ``DynamicLayer`` grows its keys and values by ``torch.cat`` at every decode step:
each step allocates the whole cache of every layer again and copies it over. On CPU, with the
allocator's mmap threshold (``ragfactory/memory.py``), each of those blocks is a fresh mapping
the kernel faults in and zeroes, so a decode step cost a copy of the whole cache plus a page
fault per 4 KiB of it. ``reserve_cache`` gives each layer of a prefilled cache a buffer of the
chunk's full width (its prompt plus its longest ``max_tokens``: what ``decode_memory`` already
budgets), and ``ReservedLayer`` writes each step's keys and values into the next slots and
hands attention a view of the slots filled so far: the same values, in the same shape, with no
allocation per step. Rows that finish are dropped by one copy into a smaller buffer.

``grouped_query_attention`` lets PyTorch's SDPA read the model's few KV heads directly
(``enable_gqa``) instead of transformers copying each of them once per query head at every
layer and step (``repeat_kv``), which it does whenever a padding mask is given.

Reserved buffers change no number: ``tests/llm/test_kv_buffers.py`` asserts the same token ids
and bitwise-equal log-probs with and without them. Grouped-query attention alone changes none
either, but with the buffers' strided views SDPA takes another path: the same tokens in the
tests, log-probs within ~2e-5, about a third of the decode CPU (docs/engine.md), so it is the
engine option ``gqa_attention``, off by default.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from transformers.cache_utils import DynamicLayer

GQA_VARIABLE = "TRANSFORMERS_SDPA_FORCE_GQA"


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views of buffers with room to grow."""

    def reserve(self, keys, values, room: int) -> None:
        """Hold ``keys`` and ``values`` in buffers ``room`` slots longer than they are."""
        self.is_initialized, self.device = True, keys.device
        self._filled = keys.shape[-2]
        self._keys = keys.new_empty((*keys.shape[:-2], self._filled + room, keys.shape[-1]))
        self._values = values.new_empty((*values.shape[:-2], self._filled + room, values.shape[-1]))
        self._keys[..., : self._filled, :].copy_(keys)
        self._values[..., : self._filled, :].copy_(values)
        self._expose()

    def _expose(self) -> None:
        self.keys = self._keys[..., : self._filled, :]
        self.values = self._values[..., : self._filled, :]

    def update(self, key_states, value_states, *args, **kwargs):
        """Write the step's keys and values into the next slots; the filled slots as views."""
        end = self._filled + key_states.shape[-2]
        if end > self._keys.shape[-2]:  # past the reservation (not within a budgeted chunk)
            self.reserve(self.keys, self.values, max(end - self._filled, self._keys.shape[-2]))
        self._keys[..., self._filled : end, :].copy_(key_states)
        self._values[..., self._filled : end, :].copy_(value_states)
        self._filled = end
        self._expose()
        return self.keys, self.values

    def adopt(self, keys, values, filled: int) -> None:
        """Hold ``keys`` and ``values`` (buffers already laid out) with ``filled`` slots in use."""
        self.is_initialized, self.device = True, keys.device
        self._keys, self._values, self._filled = keys, values, filled
        self._expose()

    def batch_select_indices(self, indices, first: int = 0) -> None:
        """Keep the rows ``indices`` (finished rows leave the batch) and the slots from ``first``
        on (leading slots that only finished rows used): one copy, room kept."""
        self._keys, self._values = self._keys[indices, :, first:], self._values[indices, :, first:]
        self._filled -= first
        self._expose()

    def get_seq_length(self) -> int:
        return self._filled if self.is_initialized else 0


def reserve_cache(cache, room: int):
    """``cache`` (a prefilled ``DynamicCache``) with every layer moved into buffers ``room`` token
    slots wider; the same object, its old tensors released."""
    layers = []
    for layer in cache.layers:
        reserved = ReservedLayer()
        reserved.reserve(layer.keys, layer.values, room)
        layer.keys = layer.values = None
        layers.append(reserved)
    cache.layers = layers
    return cache


def merged_cache(running, arriving, room: int, reserved: bool = True):
    """One cache of ``running``'s rows then ``arriving``'s (``running`` None: an empty batch):
    each row's slots right-aligned to the wider cache's width, its left padding zeros (finite,
    so a masked slot weighs nothing), ``room`` slots reserved after them (none and transformers'
    growing layers where not ``reserved``). Merged a layer at a time, each part released once
    copied: the merge holds the caches plus one layer's copy."""
    room = room if reserved else 0
    if running is None:
        return reserve_cache(arriving, room) if reserved else arriving
    width = max(running.get_seq_length(), arriving.get_seq_length())
    for i, layer in enumerate(running.layers):
        parts = (layer, arriving.layers[i])
        keys, values = (_aligned([getattr(p, name) for p in parts], width, room) for name in ("keys", "values"))
        for part in parts:
            part.keys = part.values = None
            if isinstance(part, ReservedLayer):
                part._keys = part._values = None
        merged = ReservedLayer() if reserved else DynamicLayer()
        if reserved:
            merged.adopt(keys, values, width)
        else:
            merged.is_initialized, merged.device, merged.keys, merged.values = True, keys.device, keys, values
        running.layers[i] = merged
    return running


def select_rows(cache, indices, first: int = 0) -> None:
    """Keep the rows ``indices`` of every layer, and its slots from ``first`` on."""
    for layer in cache.layers:
        if isinstance(layer, ReservedLayer):
            layer.batch_select_indices(indices, first)
        else:
            layer.keys, layer.values = layer.keys[indices, :, first:], layer.values[indices, :, first:]


def _aligned(parts: list, width: int, room: int):
    """``parts`` (rows x heads x slots x dim) stacked along the rows, each right-aligned in
    ``width`` slots, zeros before it, ``room`` empty slots after."""
    first = parts[0]
    rows = sum(p.shape[0] for p in parts)
    out = first.new_empty((rows, first.shape[1], width + room, first.shape[3]))
    start = 0
    for part in parts:
        end, pad = start + part.shape[0], width - part.shape[-2]
        out[start:end, :, :pad].zero_()
        out[start:end, :, pad:width].copy_(part)
        start = end
    return out


@contextlib.contextmanager
def grouped_query_attention(enabled: bool = True) -> Iterator[None]:
    """SDPA on the model's own KV heads for the block (transformers reads ``GQA_VARIABLE`` at
    every attention call); a value the environment already sets wins, and it is restored."""
    if not enabled or GQA_VARIABLE in os.environ:
        yield
        return
    os.environ[GQA_VARIABLE] = "1"
    try:
        yield
    finally:
        os.environ.pop(GQA_VARIABLE, None)
