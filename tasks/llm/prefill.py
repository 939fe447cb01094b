"""Prefill of the rows joining the transformers engine's running batch: every prompt whole, or after its stored prefix.

``Prefiller.prefill`` returns what the decode loop (``tasks/llm/transformers_backend.py``) starts
from: each row's last-position logits, its attention mask and a ``DynamicCache`` of the chunk's
prompts left-padded to the longest one. Identical prompts go through the model once either way.

Without ``prefix_reuse`` every distinct prompt is prefilled from its first token. With it, an
engine call first prefills the prefixes its prompts share (``branch_points`` in
``tasks/llm/prefix_store.py``: siblings of a search tree share their ancestors' history, an
evaluation's prompts one instruction), shortest first, each extending the longest stored prefix
it starts with; then each chunk's prompts extend theirs. An extension pass lays a row out as
``[pad][stored prefix][pad][new tokens]``: the stored keys and values are copied in (the cache
part, right-aligned to the longest prefix), the new tokens go through the model left-padded,
with positions counted over the row's real tokens only (the mask's running sum), so a token
sits at the position it has in its prompt. The pass's cache is then gathered into the layout of
the whole prefill (every row's tokens contiguous, left-padded to the chunk's width), so the
decode loop runs unchanged. Prefixes and prompts are stored (whole blocks) for later calls, in a
``PrefixStore`` of at most ``kv_cache_mb``, least recently used out first.

What reuse changes: the same keys and values and logits up to float rounding, not bit for bit.
A stored prefix's tokens were computed in a pass of another width, and a new token attends over
a cache laid out differently, so sums run in another order (logits move by about 4e-5 on
SmolLM2). A token changes only where that is enough: a greedy row's two best logits that close,
a sampled row's draw that close to a boundary of its cumulative distribution. Today's engine
already moves by as much between a row prefilled alone and in a batch of another width.
``tests/llm/test_prefix_reuse.py`` checks seeded rows; ``benchmarks/prefix_reuse.py`` counts
the rows that part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.llm.decode_memory import joined_cache, kv_token_slots, sized_for
from ragfactory.tasks.llm.prefix_store import PrefixStore, branch_points, levels


@dataclass
class PrefillCounts:
    """Prompt tokens against the tokens prefill put through the model, over an engine's calls."""

    calls: int = 0
    prompt_tokens: int = 0  # every decoded row's prompt (a request's n samples count n times)
    computed_tokens: int = 0  # tokens that went through the model, shared prefixes once
    last_prompt_tokens: int = 0  # the latest engine call's
    last_computed_tokens: int = 0

    @property
    def computed_ratio(self) -> float:
        return self.computed_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "computed_tokens": self.computed_tokens,
            "computed_ratio": round(self.computed_ratio, 4),
        }

    def start(self, prompt_tokens: int) -> None:
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.last_prompt_tokens, self.last_computed_tokens = prompt_tokens, 0

    def add(self, computed: int) -> None:
        self.computed_tokens += computed
        self.last_computed_tokens += computed


class Prefiller:
    """The prefill of one loaded model; ``store`` is None unless prefixes are reused."""

    def __init__(self, model, cache_arg: str, pad_id: int, device: str, settings, token_bytes: int):
        self.model, self.cache_arg, self.pad_id, self.device = model, cache_arg, pad_id, device
        self.prefill_tokens = settings.prefill_tokens
        kv_mb = sized_for(settings, device).kv_cache_mb  # the backend's (resolved already), or the device's
        self.slots = kv_token_slots(kv_mb, token_bytes)
        self.counts = PrefillCounts()
        full = _full_attention(model.config)
        reuse, shared = getattr(settings, "prefix_reuse", False), getattr(settings, "shared_prefixes", False)
        unpadded = getattr(settings, "unpadded_kv", False)
        for name, value in (("prefix_reuse", reuse), ("shared_prefixes", shared), ("unpadded_kv", unpadded)):
            if value and not full:
                raise ValueError(f"{name} needs a model whose every layer attends to the whole prompt")
        if shared and unpadded:
            raise ValueError("shared_prefixes and unpadded_kv are two layouts of the decode cache: set one")
        reuse = full if reuse is None else reuse
        self.store = PrefixStore(int(kv_mb * (1 << 20)), token_bytes) if reuse else None

    def start_call(self, prompts: list[list[int]]) -> None:
        """Count an engine call's rows; with reuse, prefill (and store) the prefixes they share."""
        self.counts.start(sum(len(p) for p in prompts))
        if self.store is None:
            return
        fits = self.store.capacity // self.store.token_bytes
        shared = [p for p in branch_points(prompts, self.store.block) if len(p) <= fits and not self.store.covers(p)]
        for level in levels(shared):
            for seqs, hits, _ in self._groups([list(p) for p in level]):
                width = max(len(s) for s in seqs)
                _, cache = self._extend(seqs, hits, width)
                self._keep(seqs, cache, width)

    def prefill(self, rows: list):
        """Last-position logits, the left-padded mask and the KV cache of ``rows``' prompts.

        Each distinct prompt goes through the model once and its cache is copied to every row
        that shares it (the ``n`` samples of a request, identical requests): prefill is most of
        an engine call's work on CPU, and a request's samples all read the same prompt. Prompts
        go through in groups of ``prefill_tokens`` padded tokens, each padded to the chunk's
        width, and the groups' caches are joined along the batch.
        """
        logits, mask, cache, index = self.prefill_distinct(rows)
        if len(mask) < len(rows):
            cache.batch_select_indices(index)
            logits, mask = logits[index], mask[index]
        return logits, mask, cache

    def prefill_distinct(self, rows: list):
        """``prefill`` with one row of logits, mask and cache per distinct prompt, in order of
        first appearance, and each row's index among them."""
        import torch

        distinct: dict[tuple[int, ...], int] = {}
        index = [distinct.setdefault(tuple(r.prompt), len(distinct)) for r in rows]
        prompts = list(distinct)
        width = max(len(p) for p in prompts)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for b, prompt in enumerate(prompts):
            mask[b, width - len(prompt) :] = 1
        mask = mask.to(self.device)
        if self.store is None:
            logits, cache = self._whole(prompts, mask)
        else:
            logits, cache = self._reusing(prompts, width)
        return logits, mask, cache, torch.tensor(index, device=self.device)

    def _whole(self, prompts: list[tuple[int, ...]], mask):
        """Every prompt from its first token, left-padded, ``prefill_tokens`` padded tokens a pass."""
        import torch

        width = mask.shape[1]
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        for b, prompt in enumerate(prompts):
            ids[b, width - len(prompt) :] = torch.tensor(prompt)
        ids = ids.to(self.device)
        self.counts.add(sum(len(p) for p in prompts))
        group = max(1, self.prefill_tokens // width)
        parts = [self._pass(ids[g : g + group], mask[g : g + group]) for g in range(0, len(prompts), group)]
        logits, cache = torch.cat([p[0] for p in parts]), joined_cache([p[1] for p in parts])
        del parts
        return logits, cache

    def _pass(self, ids, mask):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        logits = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_arg: cache},
        ).logits[:, -1, :]
        return logits, cache

    def _reusing(self, prompts: list[tuple[int, ...]], width: int):
        """Every prompt after the longest stored prefix it starts with; then stored itself."""
        import torch

        parts, order = [], []
        for seqs, hits, rows in self._groups([list(p) for p in prompts]):
            logits, cache = self._extend(seqs, hits, width)
            self._keep(seqs, cache, width)
            parts.append((logits, cache))
            order += rows
        logits = torch.cat([p[0] for p in parts])
        back = None  # the passes' rows back to the prompts' order, where the passes moved them
        if order != sorted(order):
            back = torch.tensor(order).argsort().to(self.device)
            logits = logits[back]
        cache = joined_cache([p[1] for p in parts], back)
        del parts
        return logits, cache

    def _groups(self, seqs: list[list[int]]):
        """``seqs`` in passes, each with its store hits and its rows' places in ``seqs``.

        A pass pads its rows' new tokens to the longest's (and their stored prefixes to the
        longest's), so rows go through in order of new tokens, cut where ``_cuts`` finds the
        least padded work. A pass computes at most ``prefill_tokens`` padded new tokens (as a
        whole prefill's pass holds at most that many) and holds at most ``kv_cache_mb`` of
        stored and new keys and values."""
        hits = [self.store.lookup(s, len(s) - 1) for s in seqs]
        fresh = [len(s) - h for s, (h, _) in zip(seqs, hits)]
        order = sorted(range(len(seqs)), key=lambda i: (fresh[i], hits[i][0]))
        new, held = [fresh[i] for i in order], [hits[i][0] for i in order]
        for start, end in _cuts(new, held, self.prefill_tokens, self.slots):
            rows = order[start:end]
            yield [seqs[i] for i in rows], [hits[i] for i in rows], rows

    def _extend(self, seqs: list[list[int]], hits: list, width: int):
        """One pass over ``seqs``' tokens after their stored prefixes: last logits, and the cache
        gathered into ``width`` slots, each row's tokens contiguous and left-padded."""
        import torch
        from transformers import DynamicCache

        held = max(h for h, _ in hits)
        new = max(len(s) - h for s, (h, _) in zip(seqs, hits))
        self.counts.add(sum(len(s) - h for s, (h, _) in zip(seqs, hits)))
        ids = torch.full((len(seqs), new), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), held + new), dtype=torch.long)
        for b, (seq, (h, _)) in enumerate(zip(seqs, hits)):
            ids[b, new - (len(seq) - h) :] = torch.tensor(seq[h:])
            mask[b, held - h : held] = 1
            mask[b, held + new - (len(seq) - h) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        cache = DynamicCache(config=self.model.config)
        if held:
            self._fill(cache, hits, held, len(seqs))
        logits = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=(mask.cumsum(-1) - 1)[:, held:].clamp(min=0),
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_arg: cache},
        ).logits[:, -1, :]
        _gather(cache, _slots([len(s) for s in seqs], [h for h, _ in hits], held, new, width))
        return logits, cache

    def _fill(self, cache, hits: list, held: int, rows: int) -> None:
        """The stored prefixes copied into ``cache``, each right-aligned in ``held`` slots."""
        first = next(entry for _, entry in hits if entry is not None)
        for i, (keys0, _) in enumerate(first.kv):
            shape = (rows, keys0.shape[1], held, keys0.shape[3])
            keys, values = keys0.new_zeros(shape), keys0.new_zeros(shape)
            for b, (h, entry) in enumerate(hits):
                if h:
                    keys[b, :, held - h :] = entry.kv[i][0][0, :, :h]
                    values[b, :, held - h :] = entry.kv[i][1][0, :, :h]
            cache.update(keys, values, i)

    def _keep(self, seqs: list[list[int]], cache, width: int) -> None:
        """Each sequence's whole blocks into the store, copied out of the ``width``-slot cache."""
        block = self.store.block
        for b, seq in enumerate(seqs):
            length = len(seq) // block * block
            if not length or self.store.covers(seq[:length]):
                continue
            start = width - len(seq)
            kv = [
                (
                    layer.keys[b : b + 1, :, start : start + length].clone(),
                    layer.values[b : b + 1, :, start : start + length].clone(),
                )
                for layer in cache.layers
            ]
            self.store.insert(seq[:length], kv)


# What a prefill pass costs besides its padded tokens, in tokens' worth of model work (the
# layers' fixed costs, the stored prefixes' copy, the gather); and how many (query, key) pairs
# of attention cost as much as one token through the linear layers on SmolLM2-135M
# (2 x 107 M weights against 30 layers x 2 x 2 x 576): the cost ``_cuts`` minimises.
PASS_TOKENS = 16
PAIRS_PER_TOKEN = 3100


def _cuts(new: list[int], held: list[int], max_tokens: int, slots: int) -> list[tuple[int, int]]:
    """Where to cut rows (sorted by ``new`` tokens) into passes at the least padded work.

    A pass of rows ``i..j`` costs its rows times their longest ``new`` (the padded tokens the
    model computes), and their attention over the longest stored prefix plus those tokens, plus
    ``PASS_TOKENS``; a pass of more than one row holds at most ``max_tokens`` padded new tokens
    and ``slots`` of keys and values. The cheapest cut, found over every one (rows are few):

    >>> _cuts([10, 10, 12, 400, 410], [0] * 5, 4096, 10**6)
    [(0, 3), (3, 5)]
    >>> _cuts([100, 100, 100], [0] * 3, 200, 10**6)
    [(0, 2), (2, 3)]
    """
    best, cut = [0.0] + [float("inf")] * len(new), [0] * (len(new) + 1)
    for end in range(1, len(new) + 1):
        longest, width = 0, new[end - 1]  # rows are sorted: the last is the longest
        for start in range(end - 1, -1, -1):
            longest, rows = max(longest, held[start]), end - start
            if rows > 1 and (rows * width > max_tokens or rows * (longest + width) > slots):
                break
            cost = best[start] + rows * width * (1 + (longest + width) / PAIRS_PER_TOKEN) + PASS_TOKENS
            if cost < best[end]:
                best[end], cut[end] = cost, start
    bounds, end = [], len(new)
    while end:
        bounds.append((cut[end], end))
        end = cut[end]
    return bounds[::-1]


def _slots(lengths: list[int], held: list[int], cached: int, new: int, width: int):
    """For each row and each of ``width`` slots, the column of the extension pass's cache
    (``cached`` stored slots, then ``new``) that holds it; padding reads column 0."""
    import torch

    index = torch.zeros((len(lengths), width), dtype=torch.long)
    for b, (length, h) in enumerate(zip(lengths, held)):
        fresh = length - h
        index[b, width - length : width - fresh] = torch.arange(cached - h, cached)
        index[b, width - fresh :] = torch.arange(cached + new - fresh, cached + new)
    return index


def _gather(cache, index) -> None:
    """Every layer of ``cache`` rearranged along its slots by ``index`` (rows x slots)."""
    for layer in cache.layers:
        rows, heads, _, dim = layer.keys.shape
        at = index.to(layer.keys.device)[:, None, :, None].expand(rows, heads, index.shape[1], dim)
        layer.keys, layer.values = layer.keys.gather(2, at), layer.values.gather(2, at)


def _full_attention(config) -> bool:
    """Whether every cache layer keeps every token (no sliding window that a stored prefix would outgrow)."""
    from transformers import DynamicCache

    return all(type(layer).__name__ == "DynamicLayer" for layer in DynamicCache(config=config).layers)
