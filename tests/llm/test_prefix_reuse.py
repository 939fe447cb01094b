"""Prefix reuse in the transformers engine: the store, the sharing plan, and outputs unchanged.

Reuse on and off must give the same completions. Not bit for bit: a reused prefix's keys and
values were computed in a pass of another width and a new token attends over a cache laid out
differently, so float32 sums run in another order (measured on SmolLM2: logits within 4e-5,
sampled log-probabilities within 2e-5, the size of the difference between a row prefilled alone
and in a batch today). The tests therefore ask for the same token ids, which holds unless a
greedy row's two best logits, or a sampled row's draw and a boundary of its cumulative
distribution, lie that close (none of these seeded rows does; benchmarks/prefix_reuse.py
counts how often longer sampled rows part: one in 14 rows of 16 tokens), and
log-probabilities within ``LOGPROB_TOL`` = 1e-3: fifty times the measured difference, and a
thousandth of a nat, far below any difference a reader of the figures could act on.
"""

from __future__ import annotations

import pytest
import torch

from ragfactory.tasks.llm.prefill import _cuts
from ragfactory.tasks.llm.prefix_store import PrefixStore, block_hashes, branch_points, levels
from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
from ragfactory.tasks.llm.types import Request
from tests.llm.engine_requests import assert_same_completions, tree_requests


def kv(length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((1, 1, length, 2), float(length)), torch.zeros((1, 1, length, 2)))]


def test_block_hashes_chain_whole_blocks():
    tokens = list(range(40))
    assert len(block_hashes(tokens, 16)) == 2
    assert block_hashes(tokens[:32], 16) == block_hashes(tokens, 16)
    assert block_hashes([9] + tokens[1:], 16)[1] != block_hashes(tokens, 16)[1]


def test_the_store_finds_the_longest_held_prefix_and_supersedes_prefixes():
    store = PrefixStore(capacity=1000, token_bytes=1, block=4)
    base = list(range(100, 112))
    assert store.insert(base[:8], kv(8))
    assert store.lookup(base, len(base)) == (8, store.lookup(base, 8)[1])
    assert store.insert(base, kv(12)) and len(store) == 1  # the 8-token entry is part of it
    length, entry = store.lookup(base[:8] + [1, 2, 3, 4], 12)
    assert length == 8 and entry.tokens == tuple(base)  # a shorter match inside a longer entry
    assert store.lookup(base, 11)[0] == 8  # never past the limit (a prompt's last token)
    assert store.lookup([7] + base[1:], 12) == (0, None)
    assert not store.insert(base, kv(12)) and store.bytes == 12


def test_the_store_evicts_least_recently_used_within_its_bytes():
    store = PrefixStore(capacity=20, token_bytes=1, block=4)
    a, b, c = [1] * 8, [2] * 8, [3] * 8
    store.insert(a, kv(8))
    store.insert(b, kv(8))
    store.lookup(a, 8)  # a is now the more recent
    store.insert(c, kv(8))
    assert store.covers(a) and store.covers(c) and not store.covers(b) and store.bytes == 16
    assert not store.insert([4] * 24, kv(24))  # larger than the whole store


def test_branch_points_are_the_shared_block_prefixes_in_rounds():
    root = list(range(32))
    left, right = root + [1] * 20, root + [2] * 20
    prompts = [left + [5] * 3, left + [6] * 3, right + [7], right + [7], list(range(50, 60))]
    points = branch_points(prompts, block=16)
    assert points == [tuple(root), tuple(left[:48])]  # right's pair is one prompt, identical
    assert levels(points) == [[tuple(root)], [tuple(left[:48])]]
    assert branch_points([root, root + [1]], block=16) == [tuple(root[:16])]  # a prompt's last token stays


@pytest.mark.parametrize(
    "new,held,max_tokens,expected",
    [
        # one pass of all five: 5 x 410 x (1 + 410/3100) + 16 = 2,337; the three short rows apart:
        # 3 x 12 x (1 + 12/3100) + 16 = 52.1, and 2 x 410 x (1 + 410/3100) + 16 = 944.5
        ([10, 10, 12, 400, 410], [0] * 5, 4096, [(0, 3), (3, 5)]),
        ([100, 100, 100], [0] * 3, 200, [(0, 2), (2, 3)]),  # at most 200 padded tokens a pass
        # together 2 x 5 x (1 + 3005/3100) + 16 = 35.7 beats apart, 21.0 + 25.8 = 46.9
        ([5, 5], [0, 3000], 4096, [(0, 2)]),
        ([7], [0], 4096, [(0, 1)]),
    ],
)
def test_rows_are_cut_into_passes_at_the_least_padded_work(new, held, max_tokens, expected):
    assert _cuts(new, held, max_tokens, slots=10**6) == expected


def test_a_pass_holds_at_most_the_slots_of_keys_and_values():
    # 2 rows x (1,000 held + 10 new) = 2,020 slots > 2,000: the two rows go through apart
    assert _cuts([10, 10], [1000, 1000], 4096, slots=2000) == [(0, 1), (1, 2)]
    assert _cuts([10, 10], [1000, 1000], 4096, slots=2020) == [(0, 2)]


# ---- the engine, reuse on and off ----------------------------------------------------------


def engines(model, **options) -> tuple[TransformersBackend, TransformersBackend]:
    off = TransformersBackend(model, TransformersSettings(device="cpu", prefix_reuse=False, **options))
    on = TransformersBackend(model, TransformersSettings(device="cpu", prefix_reuse=True, **options))
    return off, on


def test_reuse_changes_no_completion_of_a_tiny_model_and_counts_its_prefill(tiny_model):
    """A random tiny Llama, small prefill passes and a store that cannot hold a whole call:
    several groups, store hits from the same and the previous call, evictions; same outputs."""
    off, on = engines(tiny_model, prefill_tokens=700, kv_cache_mb=0.2)
    requests = tree_requests()
    first_off, first_on = off.generate_batch(requests), on.generate_batch(requests)
    assert_same_completions(first_off, first_on)
    computed, prompt = on.prefill_counts.last_computed_tokens, on.prefill_counts.last_prompt_tokens
    assert prompt == off.prefill_counts.last_prompt_tokens
    assert computed < 0.5 * off.prefill_counts.last_computed_tokens
    assert on.prefill_counts.computed_tokens <= prompt
    deeper = [Request.chat(r.messages_json() + [{"role": "user", "content": "Go on."}], max_tokens=4) for r in requests]
    assert_same_completions(off.generate_batch(deeper), on.generate_batch(deeper))
    assert on.prefill_counts.last_computed_tokens < 0.4 * on.prefill_counts.last_prompt_tokens  # the store's hits


@pytest.mark.slow
def test_reuse_changes_no_completion_of_smollm(embedded_model):
    """SmolLM2: greedy and seeded samples, under a grammar and free, give the same token ids
    and log-probabilities within ``LOGPROB_TOL`` with reuse on as off, prefilling far less."""
    from ragfactory.tasks.prompts.loader import load_grammar

    off, on = engines(embedded_model)
    requests = tree_requests(grammar=load_grammar("decex_self_answer", 48))
    assert_same_completions(off.generate_batch(requests), on.generate_batch(requests))
    assert on.prefill_counts.computed_ratio < 0.4 < off.prefill_counts.computed_ratio


@pytest.mark.parametrize("sliding_window", [None, 4])
def test_reuse_is_on_by_default_where_the_model_attends_to_the_whole_prompt(sliding_window):
    """None (the default): a store for a full-attention model, none for a sliding window that a
    stored prefix would outgrow; true there is refused, false never keeps a store."""
    from transformers import MistralConfig, MistralForCausalLM

    from ragfactory.tasks.llm.prefill import Prefiller

    config = MistralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, sliding_window=sliding_window)  # fmt: skip
    model = MistralForCausalLM(config)

    def store(**options):
        return Prefiller(model, "past_key_values", 0, "cpu", TransformersSettings(device="cpu", **options), 256).store

    assert (store() is not None) == (sliding_window is None)
    assert store(prefix_reuse=False) is None
    if sliding_window is None:
        assert store(prefix_reuse=True) is not None
    else:
        with pytest.raises(ValueError, match="prefix_reuse needs a model whose every layer attends"):
            store(prefix_reuse=True)
