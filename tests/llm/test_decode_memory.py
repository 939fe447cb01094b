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


def test_the_running_batch_is_sized_by_its_device_where_the_settings_leave_it_open():
    """A CPU: 256 MB and 32 rows. CUDA: a quarter of the free memory, at most 8 GiB, and 256 rows
    (24 GiB free: 6 GiB; 80 GiB free: the 8 GiB cap). A setting given is kept on either."""
    from ragfactory.tasks.llm.decode_memory import device_budget

    assert device_budget(None, None, "cpu") == (256.0, 32)
    assert device_budget(None, None, "cuda", free_bytes=24 << 30) == (6144.0, 256)
    assert device_budget(None, None, "cuda:1", free_bytes=80 << 30) == (8192.0, 256)
    assert device_budget(64.0, 7, "cuda", free_bytes=80 << 30) == (64.0, 7)
    assert device_budget(None, 7, "cpu") == (256.0, 7)
