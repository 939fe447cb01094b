"""Reserved KV buffers and grouped-query attention change no number, and allocate no step."""

from __future__ import annotations

import os

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from ragfactory.tasks.llm.kv_buffers import GQA_VARIABLE, ReservedLayer, grouped_query_attention, reserve_cache


def _states(rows: int, tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 3, tokens, 8, generator=generator), torch.randn(rows, 3, tokens, 8, generator=generator)


def test_a_reserved_layer_holds_what_a_dynamic_layer_holds_step_by_step():
    dynamic, prompt = DynamicLayer(), _states(4, 5, seed=0)
    dynamic.update(*prompt)
    reserved = ReservedLayer()
    reserved.reserve(dynamic.keys.clone(), dynamic.values.clone(), room=3)
    buffer = reserved._keys.data_ptr()
    for step in range(3):
        if step == 1:  # row 2 finished: the chunk keeps rows 0, 1 and 3
            keep = torch.tensor([0, 1, 3])
            dynamic.batch_select_indices(keep)
            reserved.batch_select_indices(keep)
            buffer = reserved._keys.data_ptr()
        new = _states(dynamic.keys.shape[0], 1, seed=step + 1)
        expected, got = dynamic.update(*new), reserved.update(*new)
        assert all(torch.equal(e, g) for e, g in zip(expected, got))
        assert reserved.get_seq_length() == dynamic.get_seq_length() == 6 + step
        assert reserved._keys.data_ptr() == buffer  # written in place: no allocation per step
    assert reserved._keys.shape == (3, 3, 8, 8)  # 5 prompt slots + 3 reserved, 3 rows left


def test_a_step_past_the_reservation_grows_the_buffer_and_keeps_every_value():
    reserved, prompt = ReservedLayer(), _states(2, 4, seed=0)
    reserved.reserve(*prompt, room=1)
    first, second = _states(2, 1, seed=1), _states(2, 2, seed=2)
    reserved.update(*first)
    keys, values = reserved.update(*second)
    assert keys.shape == (2, 3, 7, 8)
    assert torch.equal(keys, torch.cat([prompt[0], first[0], second[0]], dim=-2))
    assert torch.equal(values, torch.cat([prompt[1], first[1], second[1]], dim=-2))


def test_reserve_cache_moves_every_layer_and_releases_the_old_tensors():
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer in range(2):
        cache.update(*_states(2, 4, seed=layer), layer_idx=layer)
    old = cache.layers[0]
    kept = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    assert reserve_cache(cache, room=6) is cache
    assert old.keys is None and all(isinstance(layer, ReservedLayer) for layer in cache.layers)
    assert [layer._keys.shape[-2] for layer in cache.layers] == [10, 10]
    assert all(torch.equal(layer.keys, k) and torch.equal(layer.values, v) for layer, (k, v) in zip(cache.layers, kept))
    assert cache.get_seq_length() == 4


def test_grouped_query_attention_is_set_for_the_block_only_and_yields_to_the_environment(monkeypatch):
    monkeypatch.delenv(GQA_VARIABLE, raising=False)
    with grouped_query_attention():
        assert os.environ[GQA_VARIABLE] == "1"
    assert GQA_VARIABLE not in os.environ
    monkeypatch.setenv(GQA_VARIABLE, "0")
    with grouped_query_attention():
        assert os.environ[GQA_VARIABLE] == "0"
    assert os.environ[GQA_VARIABLE] == "0"


def _same_completions(model, requests, tolerance: float = 0.0, **options) -> None:
    """The same requests through the growing cache and through reserved buffers (with
    ``options``): the same texts and ids, log-probs within ``tolerance`` (0: bit for bit)."""
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    # the defaults that move floats, off; one prefill thread: on two, the same prefill gave logits
    # 1.5e-5 apart in the two engines (each engine alike with itself), before any cache was read
    exact = {"gqa_attention": False, "prefix_reuse": False, "prefill_threads": 1, "shared_prefixes": False}
    grown = TransformersBackend(model, TransformersSettings(device="cpu", kv_buffers=False, **exact))
    reserved = TransformersBackend(model, TransformersSettings(device="cpu", **(exact | options)))
    for row_grown, row_reserved in zip(grown.generate_batch(requests), reserved.generate_batch(requests), strict=True):
        for a, b in zip(row_grown, row_reserved, strict=True):
            assert (a.text, a.completion_token_ids) == (b.text, b.completion_token_ids)
            assert a.finish_reason == b.finish_reason
            drift = [abs(x - y) for x, y in zip(a.completion_logprobs, b.completion_logprobs, strict=True)]
            assert max(drift, default=0.0) <= tolerance


def test_reserved_buffers_change_no_bit_of_a_tiny_models_completions(tiny_model):
    """Greedy and seeded samples of different lengths (rows leave the chunk at different steps),
    one under a grammar: the same ids and the same float log-probs as the growing cache."""
    from tests.llm.engine_requests import tree_requests

    _same_completions(tiny_model, tree_requests())


def test_grouped_query_attention_on_reserved_buffers_keeps_every_token_within_a_stated_drift(tiny_model):
    """``gqa_attention``: SDPA reads the strided buffer views on another path; 1e-4 is five
    times the largest drift measured (2e-5 on SmolLM2, 1e-6 on this model)."""
    from tests.llm.engine_requests import tree_requests

    _same_completions(tiny_model, tree_requests(), tolerance=1e-4, gqa_attention=True)


@pytest.mark.slow
def test_reserved_buffers_change_no_bit_of_smollms_completions(embedded_model):
    from ragfactory.tasks.prompts.loader import load_grammar
    from tests.llm.engine_requests import tree_requests

    _same_completions(embedded_model, tree_requests(grammar=load_grammar("decex_self_answer", 48)))
