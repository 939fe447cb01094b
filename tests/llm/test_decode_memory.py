"""A KV budget in token slots: bytes per token worked by hand, budgets refused by name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ragfactory.tasks.llm.decode_memory import kv_bytes_per_token, kv_token_slots


def test_smollm2_135m_takes_46080_bytes_a_token_in_float32():
    # SmolLM2-135M: 30 layers, 9 heads of 64 over a 576-wide model, 3 KV heads.
    config = SimpleNamespace(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576)
    assert kv_bytes_per_token(config, "float32") == 2 * 30 * 3 * 64 * 4 == 46_080
    assert kv_bytes_per_token(config, "bfloat16") == 23_040
    # no KV-head count: every head keeps its keys and values; head size from an explicit head_dim
    mha = SimpleNamespace(num_hidden_layers=2, num_attention_heads=4, hidden_size=64, head_dim=32)
    assert kv_bytes_per_token(mha, "float16") == 2 * 2 * 4 * 32 * 2


def test_a_budget_in_mib_buys_whole_token_slots():
    assert kv_token_slots(384, 46_080) == 384 * 1_048_576 // 46_080 == 8_738
    assert kv_token_slots(0.001, 46_080) == 1  # never zero: one row always decodes


@pytest.mark.parametrize("options", [{"kv_cache_mb": 0}, {"prefill_tokens": 0}])
def test_a_budget_that_holds_nothing_is_refused_by_name(options):
    from ragfactory.tasks.llm.transformers_backend import TransformersSettings

    with pytest.raises(ValueError, match="kv_cache_mb must be > 0 and prefill_tokens >= 1"):
        TransformersSettings(**options)
