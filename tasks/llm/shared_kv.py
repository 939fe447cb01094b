"""The running batch's KV cache with each distinct prompt held once: shared-prefix decoding.

In a search tree most rows of a decode step share their prompt: a request's ``n`` samples, a
node's rollouts, siblings asked the same question. The plain running batch
(``tasks/llm/running_batch.py``) copies that prompt's keys and values into every row, so the KV
budget holds a copy per row and every step reads each copy again. ``SharedCache`` holds a
prompt's keys and values once, in a *prefix* buffer of one row per distinct prompt (a group),
and each row's generated tokens in a *suffix* buffer of its own::

    prefix  (groups x width, right-aligned)      suffix  (rows x slots, one slot a step)
    group 0  [0 0 p p p p p p]                    row 0 (group 0)  [0 0 t t t]
    group 1  [p p p p p p p p]                    row 1 (group 0)  [0 0 t t t]
                                                  row 2 (group 1)  [0 0 0 t t]  (joined later)

A step's attention (``shared_attention``) reads each prefix once for all the rows of its group
(one batched product per layer, the group's queries side by side), reads each row's suffix,
and joins the two softmaxes exactly: ``softmax([a, b]) @ [V_a; V_b]`` is
``(exp(a - m) @ V_a + exp(b - m) @ V_b) / (sum exp(a - m) + sum exp(b - m))`` with ``m`` the
row's largest score over both. The sums run in another order than SDPA's kernel, so a row's
log-probs move in the last bits (a token only at a float tie, as other batch widths move it);
``tests/llm/test_shared_kv.py`` bounds both.

What it cannot do: rows share a prefix only when their whole prompts are equal (a prompt that
extends another is its own group), and the prefill still computes each distinct prompt as
``tasks/llm/prefill.py`` does; what it saves is decode memory and the reads of each step.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ragfactory.tasks.llm.running_batch import RunningBatch, attends_whole_prompts, decode_step

NAME = "ragfactory_shared_prefix"


class SharedRunningBatch(RunningBatch):
    """A running batch whose rows of one prompt hold its keys and values once (a ``SharedCache``):
    the budget counts each distinct prompt once and each row's generated slots."""

    def __init__(self, engine: Any, slots: int, max_rows: int):
        super().__init__(engine, slots, max_rows)
        register()
        self._groups: dict[tuple, int] = {}  # prompt -> its group
        self._row_groups: list[int] = []

    def clear(self) -> None:
        super().clear()
        self._groups, self._row_groups = {}, []

    def take(self, waiting: deque) -> list:
        """Rows from the head of ``waiting`` while groups x widest prompt + rows x (filled + longest
        remaining) slots fit."""
        prompts = set(self._groups)
        width = max(map(len, prompts), default=0)
        filled = self._cache.layers[0].filled if self.rows else 0
        room = max((r.max_tokens - len(r.tokens) for r in self.rows), default=0)
        taken: list = []
        while waiting:
            row = waiting[0]
            count, groups = len(self.rows) + len(taken) + 1, len(prompts | {tuple(row.prompt)})
            wider, longer = max(width, len(row.prompt)), max(room, row.max_tokens)
            if count > 1 and (count > self.max_rows or groups * wider + count * (filled + longer) > self.slots):
                break
            taken.append(waiting.popleft())
            prompts.add(tuple(row.prompt))
            width, room = wider, longer
        return taken

    def _prefill(self, rows: list):
        """Each row's logits, each row's distinct prompt (in place of a mask: the groups hold
        theirs) and the cache of the distinct prompts."""
        logits, _, cache, index = self.engine._prefiller.prefill_distinct(rows)
        return logits[index], index, cache

    def _join(self, rows: list, logits, index, cache) -> None:
        if self._cache is None:
            self._cache = SharedCache(len(cache.layers))
        lengths: dict[int, int] = {}
        for row, distinct in zip(rows, index.tolist()):
            key = tuple(row.prompt)
            if key not in self._groups:
                self._groups[key] = len(self._groups)
                lengths[distinct] = len(row.prompt)
            self._row_groups.append(self._groups[key])
        room = max(r.max_tokens - len(r.tokens) for r in self.rows + rows)
        self._cache.join(cache, lengths, len(rows), room)
        self._cache.set_rows(self._row_groups, len(self._groups))

    def _keep(self, index) -> None:
        import torch

        rows = [self._row_groups[k] for k in index.tolist()]
        used = sorted(set(rows))
        groups = None
        if len(used) < len(self._groups):
            groups = torch.tensor(used, device=index.device)
            renumber = {old: new for new, old in enumerate(used)}
            self._groups = {key: renumber[g] for key, g in self._groups.items() if g in renumber}
            rows = [renumber[g] for g in rows]
        self._cache.keep(index, groups)
        self._row_groups = rows
        self._cache.set_rows(rows, len(self._groups))

    def _forward(self, tokens):
        self._cache.step_mask()
        return decode_step(self.engine, self.rows, tokens, self._cache, NAME)


class SharedLayer:
    """One layer's prefix and suffix keys and values; ``update`` writes a step into the suffix."""

    def __init__(self, owner: SharedCache, keys, values, filled: int, room: int):
        self.owner = owner
        self.prefix_keys, self.prefix_values = keys, values
        self.suffix_keys = self.suffix_values = None
        self.filled, self.room = filled, room

    def update(self, key_states, value_states, *args, **kwargs):
        """Write the step's keys and values into the next suffix slot; attention reads this layer."""
        if self.filled == self.suffix_keys.shape[-2]:  # past the reservation: widen it
            self.suffix_keys, self.suffix_values = (
                _widened(t, max(1, self.room)) for t in (self.suffix_keys, self.suffix_values)
            )
        self.suffix_keys[:, :, self.filled].copy_(key_states[:, :, -1])
        self.suffix_values[:, :, self.filled].copy_(value_states[:, :, -1])
        self.filled += 1
        return self, None


class SharedCache:
    """The layers of a running batch whose rows of equal prompts share one prefix (a group)."""

    is_compileable = False

    def __init__(self, layers: int):
        self.layers: list[SharedLayer] = []
        self.count = layers
        self.prefix_mask = self.suffix_mask = None  # groups x width, rows x slots (bool)
        self.grouped = self.slot_of_row = None  # the rows' places in the grouped layout
        self.device = None  # the keys' and values' (set by the first join)

    def set_rows(self, row_groups: list[int], groups: int) -> None:
        """Each row's group (``row_groups[r]``): the gather indices between rows and groups."""
        import torch

        members: list[list[int]] = [[] for _ in range(groups)]
        for row, group in enumerate(row_groups):
            members[group].append(row)
        width = max(len(m) for m in members)
        grouped = torch.full((groups, width), len(row_groups), dtype=torch.long)  # the last: no row
        slot = [0] * len(row_groups)
        for g, rows in enumerate(members):
            for i, row in enumerate(rows):
                grouped[g, i], slot[row] = row, g * width + i
        self.grouped, self.slot_of_row = grouped.to(self.device), torch.tensor(slot, device=self.device)

    def join(self, arriving, lengths: dict[int, int], rows: int, room: int) -> None:
        """Add the prompts ``lengths`` names (``arriving``'s row -> prompt length; ``arriving`` a
        prefilled cache over distinct prompts, left-padded) as new groups, and ``rows`` new rows
        with empty suffixes; ``room`` suffix slots reserved after the filled ones. A layer at a
        time, each old part released once copied."""
        import torch

        picks, have = list(lengths), bool(self.layers)
        self.device = arriving.layers[0].keys.device
        old = self.prefix_mask.shape[0] if have else 0
        width = max([self.prefix_mask.shape[1] if have else 0, *lengths.values()])
        filled = self.layers[0].filled if have else 0
        for i in range(self.count):
            source = arriving.layers[i]
            layer = self.layers[i] if have else None
            keys, values = (
                _prefixes(getattr(layer, f"prefix_{name}", None), getattr(source, name), picks, lengths, width)
                for name in ("keys", "values")
            )
            source.keys = source.values = None
            suffix = [
                _suffixes(getattr(layer, f"suffix_{name}", None), keys, rows, filled, room)
                for name in ("keys", "values")
            ]
            if layer is None:
                layer = SharedLayer(self, keys, values, filled, room)
                self.layers.append(layer)
            layer.prefix_keys, layer.prefix_values, layer.room = keys, values, room
            layer.suffix_keys, layer.suffix_values = suffix
        mask = torch.zeros((old + len(picks), width), dtype=torch.bool, device=self.device)
        if have:
            mask[:old, width - self.prefix_mask.shape[1] :] = self.prefix_mask
        for k, pick in enumerate(picks):
            mask[old + k, width - lengths[pick] :] = True
        self.prefix_mask = mask
        count = rows + (len(self.suffix_mask) if have else 0)
        suffix_mask = torch.zeros((count, filled + room), dtype=torch.bool, device=self.device)
        if have:
            suffix_mask[: len(self.suffix_mask), :filled] = self.suffix_mask[:, :filled]
        self.suffix_mask = suffix_mask

    def keep(self, rows, groups) -> None:
        """Keep the rows ``rows`` (a tensor of indices) and the groups ``groups`` (None: all), and
        the slots they use: one copy of the suffixes, and of the prefixes when a group leaves."""
        suffix_mask = self.suffix_mask[rows]
        used = suffix_mask[:, : self.layers[0].filled].any(dim=0).nonzero()
        first = int(used[0]) if len(used) else self.layers[0].filled  # none: rows that just joined
        self.suffix_mask = suffix_mask[:, first:]
        lead = 0
        if groups is not None:
            prefix_mask = self.prefix_mask[groups]
            lead = int(prefix_mask.any(dim=0).nonzero()[0])
            self.prefix_mask = prefix_mask[:, lead:]
        for layer in self.layers:
            layer.suffix_keys, layer.suffix_values = (
                layer.suffix_keys[rows, :, first:],
                layer.suffix_values[rows, :, first:],
            )
            layer.filled -= first
            if groups is not None:
                layer.prefix_keys = layer.prefix_keys[groups, :, lead:]
                layer.prefix_values = layer.prefix_values[groups, :, lead:]

    def step_mask(self) -> None:
        """Every row attends to the slot this step writes."""
        filled = self.layers[0].filled
        if filled == self.suffix_mask.shape[1]:
            self.suffix_mask = _widened(self.suffix_mask, max(1, self.layers[0].room), dim=1)
        self.suffix_mask[:, filled] = True

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.prefix_mask.shape[1] + self.layers[layer_idx].filled

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        return self.layers[layer_idx].update(key_states, value_states)

    def __len__(self) -> int:
        return len(self.layers)


def shared_attention(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0, **kwargs):
    """Attention of one token a row over its group's prefix and its own suffix (module
    docstring); any other call goes to SDPA as the model's own attention would."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not isinstance(key, SharedLayer):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if not attends_whole_prompts(kwargs):
        raise ValueError("shared_prefixes attends to whole prompts without softcap or sinks; this model needs more")
    layer, cache = key, key.owner
    rows, heads, _, dim = query.shape
    kv_heads = layer.prefix_keys.shape[1]
    # products, softmax and sums in float32 over half-precision keys and values, as SDPA's own
    # half kernels compute (``.float()`` of a float32 tensor is that tensor: no copy)
    q = query[:, :, -1].reshape(rows, kv_heads, heads // kv_heads, dim).float()  # a KV head's queries together
    grouped = _grouped(q, cache)  # groups x kv heads x (members x heads a KV head) x dim
    prefix = torch.matmul(grouped, layer.prefix_keys.float().transpose(-1, -2)).mul_(scaling)
    prefix.masked_fill_(~cache.prefix_mask[:, None, None, :], float("-inf"))
    filled = layer.filled
    suffix = torch.matmul(q, layer.suffix_keys[:, :, :filled].float().transpose(-1, -2)).mul_(scaling)
    suffix.masked_fill_(~cache.suffix_mask[:, None, None, :filled], float("-inf"))
    top = torch.maximum(_by_row(prefix.amax(-1), cache, q.shape), suffix.amax(-1))  # rows x kv x h
    weights = prefix.sub_(_grouped(top, cache)[..., None]).exp_()
    total = _by_row(weights.sum(-1), cache, q.shape)
    out = _by_row(torch.matmul(weights, layer.prefix_values.float()), cache, q.shape)
    weights = suffix.sub_(top[..., None]).exp_()
    total = total + weights.sum(-1)
    out = out.add_(torch.matmul(weights, layer.suffix_values[:, :, :filled].float())).div_(total[..., None])
    return out.to(query.dtype).reshape(rows, 1, heads, dim), None


def _grouped(x, cache: SharedCache):
    """Rows x kv heads x h (x dim) laid out by group: groups x kv heads x (members * h) (x dim);
    a slot with no row holds zeros."""
    import torch

    padded = torch.cat([x, x.new_zeros((1, *x.shape[1:]))])[cache.grouped]  # groups x members x kv x h ...
    groups, members, kv_heads, per = padded.shape[:4]
    return padded.transpose(1, 2).reshape(groups, kv_heads, members * per, *x.shape[3:])


def _by_row(x, cache: SharedCache, shape):
    """The inverse of ``_grouped``: each row's part of a grouped tensor."""
    groups, kv_heads = x.shape[:2]
    members = cache.grouped.shape[1]
    x = x.reshape(groups, kv_heads, members, shape[2], *x.shape[3:]).transpose(1, 2)
    return x.reshape(groups * members, kv_heads, shape[2], *x.shape[4:])[cache.slot_of_row]


def _prefixes(held, arriving, picks: list[int], lengths: dict[int, int], width: int):
    """``held`` prefixes (groups x heads x slots x dim, or None) then ``arriving``'s rows
    ``picks``, each right-aligned in ``width`` slots behind zeros."""
    count = (held.shape[0] if held is not None else 0) + len(picks)
    out = arriving.new_zeros((count, arriving.shape[1], width, arriving.shape[3]))
    start = 0
    if held is not None:
        start = held.shape[0]
        out[:start, :, width - held.shape[2] :].copy_(held)
    for k, pick in enumerate(picks):
        length = lengths[pick]
        out[start + k, :, width - length :].copy_(arriving[pick, :, arriving.shape[2] - length :])
    return out


def _suffixes(held, like, rows: int, filled: int, room: int):
    """``held`` suffixes (rows x heads x slots x dim, or None) then ``rows`` empty ones, with
    ``room`` slots after the ``filled`` ones."""
    count = (held.shape[0] if held is not None else 0) + rows
    out = like.new_zeros((count, like.shape[1], filled + room, like.shape[3]))
    if held is not None:
        out[: held.shape[0], :, :filled].copy_(held[:, :, :filled])
    return out


def _widened(t, extra: int, dim: int = 2):
    """``t`` with ``extra`` empty slots (zeros) after its last along ``dim``."""
    import torch

    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t, t.new_zeros(shape)], dim=dim)


def register() -> None:
    """Make ``shared_attention`` an attention implementation transformers can name."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, shared_attention)
