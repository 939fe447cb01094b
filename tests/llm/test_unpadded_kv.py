"""Unpadded decoding: each row's keys and values in a buffer of its own width. Attention over a
row's own slots worked by hand, the budget that counts each row's own slots, rows that leave
without a copy, and rows that decode as the padded running batch decodes them."""

from __future__ import annotations

import math
from collections import deque
from types import SimpleNamespace

import pytest
import torch

from ragfactory.tasks.llm.unpadded_kv import UnpaddedCache, UnpaddedRunningBatch, _parts, unpadded_attention
from tests.llm.engine_requests import assert_tree_agrees, tree_requests


def _buffer(keys: list[float], values: list[float], capacity: int) -> torch.Tensor:
    """One layer, one KV head of one dimension: layers x 2 x heads x slots x dim."""
    buffer = torch.full((1, 2, 1, capacity, 1), 99.0)  # unwritten slots hold garbage
    buffer[0, 0, 0, : len(keys), 0] = torch.tensor(keys)
    buffer[0, 1, 0, : len(values), 0] = torch.tensor(values)
    return buffer


def test_each_row_attends_over_its_own_slots_and_the_one_this_step_writes():
    """One head of one dimension, scaling 1, query 1 for row 0 and 2 for row 1. Row 0 holds keys
    [0, 1] (values 10, 20) and writes key 2 (value 30) this step: weights e^0, e^1, e^2, so
    (10 + 20e + 30e^2) / (1 + e + e^2) = 25.7521. Row 1 holds key [1] (value 5) and writes key 0
    (value 7): weights e^2, e^0, so (5e^2 + 7) / (e^2 + 1) = 5.2384. The slots past each row's
    (99) weigh nothing."""
    cache = UnpaddedCache(1)
    cache.buffers = [_buffer([0.0, 1.0], [10.0, 20.0], capacity=4), _buffer([1.0], [5.0], capacity=3)]
    cache.slots = [2, 1]
    cache.start_step(1)
    step = torch.tensor([[2.0], [0.0]])[:, :, None, None]  # rows x heads x 1 x dim
    layer, _ = cache.update(step, step + torch.tensor([[28.0], [7.0]])[:, :, None, None], 0)
    out, _ = unpadded_attention(None, torch.tensor([1.0, 2.0])[:, None, None, None], layer, None, None, scaling=1.0)
    e = math.e
    expected = [(10 + 20 * e + 30 * e**2) / (1 + e + e**2), (5 * e**2 + 7) / (e**2 + 1)]
    assert out.shape == (2, 1, 1, 1)
    assert out.flatten().tolist() == pytest.approx(expected, abs=1e-4)
    assert expected == pytest.approx([25.7521, 5.2384], abs=1e-4)


def test_rows_that_leave_free_their_buffers_and_the_others_keep_theirs_uncopied():
    cache = UnpaddedCache(1)
    buffers = [_buffer([1.0], [1.0], 2), _buffer([2.0], [2.0], 3), _buffer([3.0], [3.0], 4)]
    cache.buffers, cache.slots = list(buffers), [1, 1, 1]
    cache.keep([0, 2])
    assert cache.buffers[0] is buffers[0] and cache.buffers[1] is buffers[2] and cache.slots == [1, 1]
    cache.advance()
    assert cache.slots == [2, 2] and cache.get_seq_length() == 2


def test_a_row_past_its_buffer_gets_more_slots():
    cache = UnpaddedCache(1)
    cache.buffers, cache.slots = [_buffer([1.0, 2.0], [1.0, 2.0], 2), _buffer([1.0], [1.0], 3)], [2, 1]
    cache.widen(4)
    assert [b.shape[3] for b in cache.buffers] == [6, 3]
    assert cache.buffers[0][0, 0, 0, :2, 0].tolist() == [1.0, 2.0]


def _row(prompt: int, max_tokens: int, tokens: int = 0) -> SimpleNamespace:
    return SimpleNamespace(prompt=[0] * prompt, max_tokens=max_tokens, tokens=[0] * tokens)


def test_the_budget_counts_each_rows_own_prompt_and_max_tokens():
    """A running row of a 60-token prompt with max_tokens 10 (70 slots). A row of a 20-token
    prompt with max_tokens 10 needs 30 more: 100 slots fit it, 99 do not. The padded batch would
    need 2 rows x (60 + 10) = 140."""
    for slots, taken in ((100, 1), (99, 0)):
        batch = UnpaddedRunningBatch(engine=None, slots=slots, max_rows=8)
        batch.rows = [_row(60, 10, tokens=3)]
        assert len(batch.take(deque([_row(20, 10)]))) == taken
    lone = UnpaddedRunningBatch(engine=None, slots=5, max_rows=8)
    assert len(lone.take(deque([_row(20, 10), _row(1, 1)]))) == 1  # a lone row goes whatever its width


def test_a_prefill_goes_in_parts_of_distinct_prompts_times_their_widest():
    """Slots 100. Prompts of 20, 20 (the same), 30 and 40 tokens: 2 distinct x 30 = 60, then 3 x 40
    = 120 > 100, so the 40-token prompt starts a part; a 120-token prompt is a part of its own."""
    rows = [_row(20, 1), _row(20, 1), SimpleNamespace(prompt=[1] * 30), SimpleNamespace(prompt=[2] * 40)]
    rows.append(SimpleNamespace(prompt=[3] * 120))
    assert [[len(r.prompt) for r in part] for part in _parts(rows, 100)] == [[20, 20, 30], [40], [120]]


def _engines(model, **options):
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    padded = TransformersBackend(model, TransformersSettings(device="cpu", **options))
    unpadded = TransformersBackend(model, TransformersSettings(device="cpu", unpadded_kv=True, **options))
    return padded, unpadded


@pytest.mark.parametrize("kv_cache_mb", [0.1, 64.0])
def test_rows_decode_as_the_padded_batch_decodes_them(tiny_model, kv_cache_mb):
    """A tree's requests (two samples of a prompt, greedy and sampled rows, prompts of several
    widths, a stranger), in a KV budget of about two rows (rows join and leave) and in a roomy
    one: the same token ids, log-probs within the tolerance."""
    padded, unpadded = _engines(tiny_model, kv_cache_mb=kv_cache_mb)
    assert_tree_agrees(padded, unpadded)


def test_shared_prefixes_and_unpadded_buffers_are_one_or_the_other(tiny_model):
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    engine = TransformersBackend(tiny_model, TransformersSettings(device="cpu", unpadded_kv=True, shared_prefixes=True))
    with pytest.raises(ValueError, match="shared_prefixes and unpadded_kv"):
        engine.generate_batch(tree_requests()[:1])


@pytest.mark.slow
def test_unpadded_buffers_change_no_completion_of_smollm(embedded_model):
    """SmolLM2, under a grammar and free, greedy and sampled: the same token ids and log-probs
    within the tolerance."""
    from ragfactory.tasks.prompts.loader import load_grammar

    padded, unpadded = _engines(embedded_model, kv_cache_mb=8.0)
    assert_tree_agrees(padded, unpadded, grammar=load_grammar("decex_self_answer", 48))
