"""Shared-prefix decoding: each distinct prompt's keys and values held once. Attention over a
group's prefix and a row's suffix worked by hand, the budget that counts a prompt once, and rows
that decode as the plain running batch decodes them."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import pytest
import torch

from ragfactory.tasks.llm.shared_kv import SharedCache, SharedLayer, SharedRunningBatch, shared_attention
from tests.llm.engine_requests import assert_tree_agrees


def _t(values: list[list[float]]) -> torch.Tensor:
    """Rows x 1 head x slots x 1 dim."""
    return torch.tensor(values)[:, None, :, None]


def test_attention_joins_a_groups_prefix_and_each_rows_suffix_as_one_softmax():
    """One head of one dimension, query 1, scaling 1. Group 0's prefix keys [1, 2] (values 10,
    20), group 1's [pad, 3] (value 30); rows 0 and 1 of group 0, row 2 of group 1; suffix keys
    0, 1, 2 (values 1, 2, 3). So row 0 weighs e^1, e^2, e^0: (10e + 20e^2 + 1) / (e + e^2 + 1)
    = 15.8421; row 1 e^1, e^2, e^1: (10e + 20e^2 + 2e) / (2e + e^2) = 14.0656; row 2 the pad
    weighs nothing, e^3, e^2: (30e^3 + 3e^2) / (e^3 + e^2) = 22.7386."""
    cache = SharedCache(1)
    layer = SharedLayer(cache, _t([[1.0, 2.0], [0.0, 3.0]]), _t([[10.0, 20.0], [0.0, 30.0]]), filled=1, room=0)
    layer.suffix_keys, layer.suffix_values = _t([[0.0], [1.0], [2.0]]), _t([[1.0], [2.0], [3.0]])
    cache.layers = [layer]
    cache.prefix_mask = torch.tensor([[True, True], [False, True]])
    cache.suffix_mask = torch.ones((3, 1), dtype=torch.bool)
    cache.set_rows([0, 0, 1], groups=2)
    out, _ = shared_attention(None, torch.ones((3, 1, 1, 1)), layer, None, None, scaling=1.0)
    assert out.shape == (3, 1, 1, 1)
    assert out.flatten().tolist() == pytest.approx([15.8421, 14.0656, 22.7386], abs=1e-4)


def test_half_precision_rows_are_weighed_in_float32_and_stored_in_their_dtype():
    """bfloat16, one row: prefix keys [0, 0] (values 1, 5), suffix key 1 (value 3), query 1. The
    weights 1, 1, e give (1 + 5 + 3e) / (2 + e) = 3, exact in bfloat16. Weighed in bfloat16, e
    rounds to 2.71875 and the sums round again: 2.984375."""
    half = torch.bfloat16
    cache = SharedCache(1)
    layer = SharedLayer(cache, _t([[0.0, 0.0]]).to(half), _t([[1.0, 5.0]]).to(half), filled=1, room=0)
    layer.suffix_keys, layer.suffix_values = _t([[1.0]]).to(half), _t([[3.0]]).to(half)
    cache.layers = [layer]
    cache.prefix_mask = torch.ones((1, 2), dtype=torch.bool)
    cache.suffix_mask = torch.ones((1, 1), dtype=torch.bool)
    cache.set_rows([0], groups=1)
    out, _ = shared_attention(None, torch.ones((1, 1, 1, 1), dtype=half), layer, None, None, scaling=1.0)
    assert out.dtype == half and out.flatten().tolist() == [3.0]


def test_rows_that_leave_take_their_group_and_the_slots_only_they_used():
    """Rows 0 and 1 of group 0 and row 2 of group 1, two slots filled: row 0 used both, row 1
    only the second, row 2 (joined this step) none. Keeping rows 1 and 2 drops the first slot;
    keeping row 2 alone drops group 0, the prefix slot only it used, and both suffix slots."""
    cache = SharedCache(1)
    layer = SharedLayer(cache, _t([[1.0, 2.0], [0.0, 3.0]]), _t([[10.0, 20.0], [0.0, 30.0]]), filled=2, room=1)
    layer.suffix_keys = layer.suffix_values = _t([[4.0, 5.0, 0.0], [0.0, 6.0, 0.0], [0.0, 0.0, 0.0]])
    cache.layers = [layer]
    cache.prefix_mask = torch.tensor([[True, True], [False, True]])
    cache.suffix_mask = torch.tensor([[True, True, False], [False, True, False], [False, False, False]])
    cache.keep(torch.tensor([1, 2]), None)
    assert layer.filled == 1 and layer.suffix_keys[:, 0, :, 0].tolist() == [[6.0, 0.0], [0.0, 0.0]]
    cache.keep(torch.tensor([1]), torch.tensor([1]))
    assert layer.filled == 0 and layer.suffix_keys.shape[2] == 1
    assert layer.prefix_keys[:, 0, :, 0].tolist() == [[3.0]] and cache.prefix_mask.tolist() == [[True]]


def _row(prompt: int, max_tokens: int, tokens: int = 0, token: int = 0) -> SimpleNamespace:
    """A row of a ``prompt``-token prompt (all ``token``) with ``tokens`` generated so far."""
    return SimpleNamespace(prompt=[token] * prompt, max_tokens=max_tokens, tokens=[0] * tokens)


def _batch(slots: int, running: list, filled: int) -> SharedRunningBatch:
    batch = SharedRunningBatch(engine=None, slots=slots, max_rows=8)
    batch.rows = running
    batch._groups = {tuple(r.prompt): 0 for r in running}
    batch._cache = SimpleNamespace(layers=[SimpleNamespace(filled=filled)])
    return batch


def test_the_budget_counts_each_prompt_once_and_each_rows_slots():
    """Two rows of one 30-token prompt, 4 slots filled, 6 and 2 tokens left. Another row of that
    prompt with max_tokens 5: 1 group x 30 + 3 rows x (4 + 6) = 60 slots. A row of a new
    20-token prompt: 2 groups x 30 + 3 x 10 = 90."""
    running = [_row(30, 10, tokens=4), _row(30, 8, tokens=6)]
    assert len(_batch(60, running, filled=4).take(deque([_row(30, 5)]))) == 1
    assert _batch(59, running, filled=4).take(deque([_row(30, 5)])) == []
    other = _row(20, 5, token=1)
    assert len(_batch(90, running, filled=4).take(deque([other]))) == 1
    assert _batch(89, running, filled=4).take(deque([other])) == []


def _engines(model, **options):
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    plain = TransformersBackend(model, TransformersSettings(device="cpu", shared_prefixes=False, **options))
    shared = TransformersBackend(model, TransformersSettings(device="cpu", shared_prefixes=True, **options))
    return plain, shared


@pytest.mark.parametrize("kv_cache_mb", [0.1, 64.0])
def test_rows_sharing_prompts_decode_as_the_plain_batch_decodes_them(tiny_model, kv_cache_mb):
    """A tree's requests (two samples of a prompt, greedy and sampled rows, a stranger), in a KV
    budget of about two rows (rows join and leave, groups empty) and in a roomy one: the same
    token ids, log-probs within the tolerance."""
    plain, shared = _engines(tiny_model, kv_cache_mb=kv_cache_mb)
    assert_tree_agrees(plain, shared)


@pytest.mark.slow
def test_shared_prefixes_change_no_completion_of_smollm(embedded_model):
    """SmolLM2, under a grammar and free, greedy and sampled: the same token ids and log-probs
    within the tolerance."""
    from ragfactory.tasks.prompts.loader import load_grammar

    plain, shared = _engines(embedded_model, kv_cache_mb=8.0)
    assert_tree_agrees(plain, shared, grammar=load_grammar("decex_self_answer", 48))
