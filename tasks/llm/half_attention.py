"""Decode attention for a half-precision model on CPU: one token a row, without SDPA's slow path.

With ``dtype: bfloat16`` on a CPU that has bf16 instructions (AVX512-BF16, AMX), the model's
matrix products run 3 to 4.5 times faster than in float32 and its weights and keys and values
take half the memory. PyTorch's SDPA on CPU is the exception: for a single query token in
bfloat16 it takes about nine times float32's time (4.6 ms against 0.5 ms for 16 rows of 400
slots, one thread), enough to make a decode step slower than in float32.

``half_decode_attention`` is registered with transformers as ``ragfactory_half_cpu`` and named
by ``use_half_attention`` for a half-precision model on CPU. A one-token query (decode) is
answered by two grouped products: each key head's queries side by side (``[rows, kv heads,
group, dim]``, so grouped-query heads need no copies of the keys), scores and softmax and the
weighted sum in float32 over the bf16 keys and values upcast, the result stored in the model's
dtype. That is the arithmetic SDPA's own kernel does for bf16 (products of bf16 values summed in
float32), so the answer moves only by rounding order. Any other call (prefill, a model with a
softcap or attention sinks) goes to SDPA unchanged, and its mask is SDPA's (registered alike).

What it cannot do: the shared-prefix batch's grouped attention (``tasks/llm/shared_kv.py``) keeps
its own SDPA calls; in half precision on CPU it is slower than the plain batch.
"""

from __future__ import annotations

from ragfactory.tasks.llm.running_batch import attends_whole_prompts

NAME = "ragfactory_half_cpu"


def half_decode_attention(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0, **kwargs):
    """Attention of one query token a row (module docstring); any other call goes to SDPA."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.shape[2] != 1 or dropout or not attends_whole_prompts(kwargs):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if attention_mask is not None:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    return one_token_attention(query, key, value, attention_mask, scaling).transpose(1, 2), None


def one_token_attention(query, key, value, mask, scaling: float):
    """``query`` ``[rows, heads, 1, dim]`` over ``key``/``value`` ``[rows, kv heads, slots, dim]``:
    ``[rows, heads, 1, dim]`` in the query's dtype. ``mask`` (``[rows, 1, 1, slots]``, True or
    0 where a slot counts, False or -inf where it does not) may be None: every slot counts."""
    import torch

    rows, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(rows, kv_heads, heads // kv_heads, dim).float()
    scores = torch.matmul(grouped, key.float().transpose(-1, -2)) * scaling  # rows, kv heads, group, slots
    if mask is not None:
        mask = mask.reshape(rows, 1, 1, -1)
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = torch.softmax(scores, dim=-1)
    out = torch.matmul(weights, value.float())
    return out.to(query.dtype).reshape(rows, heads, 1, dim)


def use_half_attention(model, device: str) -> bool:
    """Name ``half_decode_attention`` for ``model`` where it helps: a half-precision model on CPU
    whose attention is SDPA. Returns whether it did."""
    import torch

    config = model.config
    if device != "cpu" or model.dtype == torch.float32 or config._attn_implementation != "sdpa":
        return False
    register()
    config._attn_implementation = NAME
    return True


def register() -> None:
    """Make ``half_decode_attention`` an attention implementation transformers can name, with
    SDPA's mask."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(NAME, half_decode_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
