"""What a local engine's running batch may hold: KV bytes per token, token slots in a budget.

The transformers engine's running batch (``tasks/llm/running_batch.py``) holds a KV cache of
``rows x padded width x bytes per token``, where the padded width is its widest row plus the
longest ``max_tokens`` still to come: left padding gives every row the widest one's width, and
every row keeps its slots until it finishes. Bounding the row count alone lets a batch of long
prompts take gigabytes; the batch bounds the product by ``kv_token_slots``, so calls of any size
hold one batch's memory. Pure functions over plain numbers and a model config with the usual
transformers attribute names; ``joined_cache`` joins prefill passes' caches.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any


def kv_bytes_per_token(config: Any, dtype: str) -> int:
    """Keys and values of one token in every layer: 2 x layers x KV heads x head size x element."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    element = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    return 2 * config.num_hidden_layers * kv_heads * head_dim * element


# The running batch's budget where the settings leave it open (``TransformersSettings``). A CPU:
# 256 MB and 32 rows (about five rows of a 1,000-token prompt for SmolLM2-135M in float32; a CPU
# decode step costs about as much for 8 rows as for 32). A GPU, whose decode step of 128 rows costs
# little more than one of 8: a quarter of the device's free memory, at most 8 GiB, and 256 rows
# (vLLM's max_num_seqs); on an H200 that decoded 128 rows of SmolLM2 10x faster than the CPU budget
# (benchmarks/cuda_engine.py, docs/engine.md "On a GPU").
CPU_BUDGET = (256.0, 32)
CUDA_KV_MB_MAX, CUDA_ROWS = 8192.0, 256


def device_budget(
    kv_cache_mb: float | None, max_batch_size: int | None, device: str, free_bytes: int | None = None
) -> tuple[float, int]:
    """``kv_cache_mb`` and ``max_batch_size`` as given, or the defaults above for ``device`` where
    None; ``free_bytes`` is the CUDA device's free memory (read from it when None)."""
    kv_mb, rows = CPU_BUDGET
    if device.startswith("cuda"):
        if free_bytes is None and kv_cache_mb is None:
            import torch

            free_bytes = torch.cuda.mem_get_info(torch.device(device))[0]
        kv_mb, rows = min((free_bytes or 0) / 4 / (1 << 20), CUDA_KV_MB_MAX), CUDA_ROWS
    return (kv_mb if kv_cache_mb is None else kv_cache_mb, rows if max_batch_size is None else max_batch_size)


def sized_for(settings: Any, device: str) -> Any:
    """``settings`` (a ``TransformersSettings``) with the rows and KV budget of ``device_budget``
    where they are None; the same settings where both are set."""
    kv_mb, rows = device_budget(settings.kv_cache_mb, settings.max_batch_size, device)
    return replace(settings, kv_cache_mb=kv_mb, max_batch_size=rows)


def kv_token_slots(kv_cache_mb: float, bytes_per_token: int) -> int:
    """How many tokens (rows x padded width) a KV cache of ``kv_cache_mb`` MiB holds."""
    return max(1, int(kv_cache_mb * (1 << 20)) // bytes_per_token)


def joined_cache(caches: list, order=None):
    """The first of several ``DynamicCache`` objects of equal width, holding all of their rows
    (in the order of the index tensor ``order`` over the parts' rows, if given).

    Joined a layer at a time, each part dropped once copied, so the join holds the whole cache
    plus one layer's parts (building a new cache from the tensors would copy every layer again).
    """

    first = caches[0]
    if len(caches) == 1 and order is None:
        return first
    for i, layer in enumerate(first.layers):
        parts = [cache.layers[i] for cache in caches]
        keys, values = _joined([part.keys for part in parts], order), _joined([part.values for part in parts], order)
        for part in parts[1:]:
            part.keys = part.values = None
        layer.keys, layer.values = keys, values
    return first


def _joined(tensors: list, order):
    """``tensors`` joined along the batch, rows in ``order`` if given: one copy (a lone part is
    only reordered)."""
    import torch

    joined = torch.cat(tensors) if len(tensors) > 1 else tensors[0]
    return joined if order is None else joined.index_select(0, order)
