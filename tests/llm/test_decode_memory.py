"""Decode chunks within a KV budget: bytes per token and chunk boundaries worked by hand."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from ragfactory.tasks.llm.decode_memory import decode_chunks, kv_bytes_per_token, kv_token_slots


@dataclass
class Row:
    prompt: list[int]
    max_tokens: int


def rows(*lengths: int, max_tokens: int = 5) -> list[Row]:
    return [Row([0] * n, max_tokens) for n in lengths]


def widths(chunks) -> list[list[int]]:
    return [[len(r.prompt) for r in chunk] for chunk in chunks]


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


def test_rows_join_a_chunk_while_rows_times_padded_width_fits():
    # slots 100, 5 new tokens: [10] 15, [10,20] 2x25=50, [10,20,30] 3x35=105 > 100 -> cut;
    # [30] 35, [30,40] 2x45=90.
    assert widths(decode_chunks(rows(10, 20, 30, 40), max_rows=8, slots=100)) == [[10, 20], [30, 40]]


def test_the_row_count_still_bounds_a_chunk():
    assert widths(decode_chunks(rows(1, 1, 1, 1, 1), max_rows=2, slots=10_000)) == [[1, 1], [1, 1], [1]]


def test_the_longest_max_tokens_widens_every_row():
    # slots 130: 1 x 15, then 2 x (10 + 50) = 120 fits, then 3 x 60 = 180 does not: the short
    # third row pays for the long second one's width, so it starts the next chunk
    chunk = [Row([0] * 10, 5), Row([0] * 10, 50), Row([0] * 10, 5)]
    assert [[r.max_tokens for r in c] for c in decode_chunks(chunk, 8, 130)] == [[5, 50], [5]]


@pytest.mark.parametrize("slots", [1, 50])
def test_a_row_wider_than_the_budget_decodes_alone(slots):
    assert widths(decode_chunks(rows(200, 300), max_rows=8, slots=slots)) == [[200], [300]]
    assert decode_chunks([], 8, slots) == []


@pytest.mark.parametrize("options", [{"kv_cache_mb": 0}, {"prefill_tokens": 0}])
def test_a_budget_that_holds_nothing_is_refused_by_name(options):
    from ragfactory.tasks.llm.transformers_backend import TransformersSettings

    with pytest.raises(ValueError, match="kv_cache_mb must be > 0 and prefill_tokens >= 1"):
        TransformersSettings(**options)
