"""Decode attention for a half-precision model on CPU: one token a row worked by hand, masked
slots that weigh nothing, and a model's decode step that agrees with SDPA's."""

from __future__ import annotations

import inspect

import pytest
import torch

from ragfactory.tasks.llm.half_attention import NAME, half_decode_attention, one_token_attention, use_half_attention


def _keys_and_values(dtype=torch.bfloat16):
    """One row, one KV head of two dimensions, two slots: keys [2, 0] and [0, 2], values [4, 0]
    and [0, 4]."""
    keys = torch.tensor([[2.0, 0.0], [0.0, 2.0]], dtype=dtype)[None, None]
    values = torch.tensor([[4.0, 0.0], [0.0, 4.0]], dtype=dtype)[None, None]
    return keys, values


def test_two_query_heads_of_one_key_head_worked_by_hand():
    """Queries [1, 0] and [0, 1] share the key head, scaling 0.5. Head 0 scores 0.5 * [2, 0] =
    [1, 0]: weights e / (1 + e) = 0.7311 and 0.2689, so 4 * [0.7311, 0.2689] = [2.9243, 1.0757];
    head 1 the mirror, [1.0757, 2.9243]. Stored in bfloat16 (8 significant bits): 2.9243 lies
    between 2.921875 and 2.9375, nearer the first; 1.0757 between 1.0703125 and 1.078125, nearer
    the second."""
    keys, values = _keys_and_values()
    query = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.bfloat16)[None, :, None]  # 1 x 2 heads x 1 x 2
    out = one_token_attention(query, keys, values, None, scaling=0.5)
    assert out.dtype == torch.bfloat16 and out.shape == (1, 2, 1, 2)
    assert out[0, :, 0].tolist() == [[2.921875, 1.078125], [1.078125, 2.921875]]


@pytest.mark.parametrize("mask", [torch.tensor([True, False]), torch.tensor([0.0, float("-inf")])])
def test_a_masked_slot_weighs_nothing(mask):
    """The second slot masked out (a left-padded row's pad, as a bool or an additive mask): head
    0's answer is the first value, [4, 0], whatever its score."""
    keys, values = _keys_and_values()
    query = torch.tensor([[0.0, 1.0]], dtype=torch.bfloat16)[None, :, None]  # favours the masked slot
    out = one_token_attention(query, keys, values, mask.view(1, 1, 1, 2), scaling=0.5)
    assert out[0, 0, 0].tolist() == [4.0, 0.0]


def test_it_is_named_only_for_a_half_precision_model_on_cpu(tiny_model):
    from transformers import AutoModelForCausalLM

    single = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    assert not use_half_attention(single, "cpu") and single.config._attn_implementation == "sdpa"
    half = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.bfloat16)
    assert not use_half_attention(half, "cuda") and half.config._attn_implementation == "sdpa"
    assert use_half_attention(half, "cpu") and half.config._attn_implementation == NAME


def test_a_models_decode_step_agrees_with_sdpa(tiny_model):
    """The tiny Llama in bfloat16, a batch of two rows, the second left-padded by three: prefill
    goes to SDPA (the same logits, bit for bit), and a decode step's logits are SDPA's within two
    steps of bfloat16's rounding at the logits' scale (8 significant bits: 2 x 2 ** -8 of it): the
    two sum in another order, and the logits are stored in bfloat16."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.bfloat16).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [0, 0, 0, 11, 12, 13]])
    mask = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1]])
    step = torch.tensor([[14], [15]])
    cache_arg = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"

    def run(attention: str):
        model.config._attn_implementation = attention
        with torch.inference_mode():
            first = model(ids, attention_mask=mask, use_cache=True)
            positions = (mask.sum(-1, keepdim=True) - 1) + 1
            grown = torch.cat([mask, mask.new_ones(2, 1)], dim=-1)
            cache = {cache_arg: first.past_key_values}  # the name this transformers' forward gives it
            second = model(step, attention_mask=grown, position_ids=positions, use_cache=True, **cache)
        return first.logits.float(), second.logits[:, -1].float()

    use_half_attention(model, "cpu")
    prefill, decoded = run(NAME)
    sdpa_prefill, sdpa_decoded = run("sdpa")
    assert torch.equal(prefill, sdpa_prefill)
    scale = sdpa_decoded.abs().max()
    assert (decoded - sdpa_decoded).abs().max() <= scale * 2**-7


def test_other_calls_go_to_sdpa():
    """A query of two tokens (prefill) is SDPA's call: the same output, bit for bit."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    query = torch.randn(1, 4, 2, 8, dtype=torch.bfloat16)
    key, value = torch.randn(2, 1, 2, 2, 3, 8, dtype=torch.bfloat16)
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 2
    ours, _ = half_decode_attention(module, query, key, value, None, scaling=0.25)
    theirs, _ = sdpa_attention_forward(module, query, key, value, None, scaling=0.25)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("layout", [{}, {"unpadded_kv": True}, {"shared_prefixes": True}])
def test_a_bfloat16_engine_decodes_a_tree_through_it(tiny_model, layout):
    """The embedded engine in bfloat16 on CPU names the attention at load and decodes a tree's
    requests (rows joining and leaving a budget of about two rows) through the padded batch, the
    unpadded one and the shared-prefix one: every row its max_tokens, or fewer where it stopped,
    its log-probs finite."""
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
    from tests.llm.engine_requests import tree_requests

    settings = TransformersSettings(device="cpu", dtype="bfloat16", kv_cache_mb=0.05, **layout)
    engine = TransformersBackend(tiny_model, settings)
    requests = tree_requests()
    answers = engine.generate_batch(requests)
    assert engine._model.config._attn_implementation == NAME
    assert [len(a) for a in answers] == [r.sampling.n for r in requests]
    for request, samples in zip(requests, answers, strict=True):
        for completion in samples:
            assert 0 < completion.completion_tokens <= request.sampling.max_tokens
            assert completion.finish_reason in ("stop", "length")
            assert all(-1e4 < lp <= 0.0 for lp in completion.completion_logprobs)
