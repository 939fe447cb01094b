"""The running batch: caches merged and trimmed by hand, admission within the KV budget, rows that
join a running batch decoding as a roomy batch decodes them, and calls answered as their own
rows finish."""

from __future__ import annotations

import asyncio
from collections import deque
from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache

from ragfactory.tasks.llm.kv_buffers import ReservedLayer, merged_cache, select_rows
from ragfactory.tasks.llm.running_batch import RunningBatch
from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
from ragfactory.tasks.llm.types import Request
from tests.llm.engine_requests import assert_same_completions, tree_requests

LOGPROB_TOL = 1e-4  # tighter than the shared 1e-3: other batch widths move floats, not tokens


def _cache(rows: list[list[float]]) -> DynamicCache:
    """One layer, one head, one dimension: each row's slots hold the given numbers (keys), and
    ten times them (values)."""
    cache = DynamicCache()
    keys = torch.tensor(rows)[:, None, :, None]
    cache.update(keys, keys * 10, 0)
    return cache


def _slots(layer, name: str = "keys") -> list[list[float]]:
    return getattr(layer, name)[:, 0, :, 0].tolist()


def test_a_merge_right_aligns_each_part_behind_zeros_and_reserves_room():
    running, arriving = _cache([[1.0, 2.0]]), _cache([[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]])
    old = arriving.layers[0]
    merged = merged_cache(running, arriving, room=4)
    layer = merged.layers[0]
    assert merged is running and isinstance(layer, ReservedLayer)
    assert _slots(layer) == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
    assert _slots(layer, "values") == [[0.0, 10.0, 20.0], [30.0, 40.0, 50.0], [60.0, 70.0, 80.0]]
    assert layer._keys.shape == (3, 1, 7, 1) and merged.get_seq_length() == 3  # 3 filled + 4 room
    assert old.keys is None  # released once copied
    keys, _ = layer.update(torch.full((3, 1, 1, 1), 9.0), torch.zeros((3, 1, 1, 1)))
    assert keys[:, 0, :, 0].tolist() == [[0.0, 1.0, 2.0, 9.0], [3.0, 4.0, 5.0, 9.0], [6.0, 7.0, 8.0, 9.0]]


def test_a_merge_into_an_empty_batch_reserves_the_arriving_cache():
    merged = merged_cache(None, _cache([[1.0, 2.0]]), room=3)
    assert _slots(merged.layers[0]) == [[1.0, 2.0]] and merged.layers[0]._keys.shape[-2] == 5


def test_selecting_rows_drops_finished_ones_and_the_slots_only_they_used():
    merged = merged_cache(_cache([[1.0, 2.0]]), _cache([[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]), room=2)
    select_rows(merged, torch.tensor([0, 2]), first=1)  # row 1 finished; slot 0 was row 1's alone
    assert _slots(merged.layers[0]) == [[1.0, 2.0], [7.0, 8.0]]
    assert merged.get_seq_length() == 2 and merged.layers[0]._keys.shape == (2, 1, 4, 1)
    grown = _cache([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])  # transformers' own layer: the same cut
    select_rows(grown, torch.tensor([1]), first=2)
    assert _slots(grown.layers[0]) == [[6.0]]


def _row(prompt: int, max_tokens: int, tokens: int = 0) -> SimpleNamespace:
    return SimpleNamespace(prompt=[0] * prompt, max_tokens=max_tokens, tokens=[0] * tokens)


def _taken(rows: list[SimpleNamespace], max_rows: int = 8, slots: int = 100) -> list[list[int]]:
    """What an empty batch admits of ``rows``, then what it would admit of the rest, and so on:
    the batch's first admission, and how the rest would go in turns."""
    waiting, turns = deque(rows), []
    while waiting:
        turns.append([len(r.prompt) for r in RunningBatch(engine=None, slots=slots, max_rows=max_rows).take(waiting)])
    return turns


def test_rows_join_while_rows_times_padded_width_fits_the_slots():
    # slots 100, 5 new tokens: [10] 15, [10,20] 2x25=50, [10,20,30] 3x35=105 > 100 -> waits;
    # [30] 35, [30,40] 2x45=90.
    assert _taken([_row(n, 5) for n in (10, 20, 30, 40)]) == [[10, 20], [30, 40]]


def test_the_row_count_still_bounds_the_batch():
    assert _taken([_row(1, 5)] * 5, max_rows=2, slots=10_000) == [[1, 1], [1, 1], [1]]


def test_the_longest_max_tokens_widens_every_row():
    # slots 130: 1 x 15, then 2 x (10 + 50) = 120 fits, then 3 x 60 = 180 does not: the short
    # third row pays for the long second one's width, so it waits
    waiting = deque([_row(10, 5), _row(10, 50), _row(10, 5)])
    assert [r.max_tokens for r in RunningBatch(engine=None, slots=130, max_rows=8).take(waiting)] == [5, 50]


@pytest.mark.parametrize("slots", [1, 50])
def test_a_row_wider_than_the_budget_decodes_alone(slots):
    assert _taken([_row(200, 5), _row(300, 5)], slots=slots) == [[200], [300]]
    assert _taken([], slots=slots) == []


def test_a_running_batch_counts_its_filled_width_and_its_rows_remaining_tokens():
    """Two running rows, 40 slots filled, one with 6 tokens left of 10 and one with 2 of 8: a row
    of prompt 20 and max_tokens 5 needs 3 x (40 + 6) = 138 slots."""
    batch = RunningBatch(engine=None, slots=138, max_rows=8)
    batch.rows = [_row(30, 10, tokens=4), _row(34, 8, tokens=6)]
    batch._mask = torch.ones((2, 40))
    assert len(batch.take(deque([_row(20, 5)]))) == 1
    batch.slots = 137
    assert batch.take(deque([_row(20, 5)])) == []


def test_rows_that_join_a_running_batch_decode_as_a_roomy_batch_decodes_them(tiny_model):
    """A KV budget of about two rows: most rows join the batch while others decode, at other
    widths; the same ids as a budget that holds the whole call, log-probs within the tolerance."""
    roomy = TransformersBackend(tiny_model, TransformersSettings(device="cpu", prefix_reuse=False))
    tight = TransformersBackend(tiny_model, TransformersSettings(device="cpu", prefix_reuse=False, kv_cache_mb=0.1))
    requests = tree_requests()
    assert tight.kv_slots < 2.5 * max(len(tight.encode_prompt(r)) + r.sampling.max_tokens for r in requests)
    assert_same_completions(roomy.generate_batch(requests), tight.generate_batch(requests), LOGPROB_TOL)


@pytest.mark.parametrize("shared_prefixes", [False, True])
def test_a_call_is_answered_when_its_own_rows_finish_and_rows_of_later_calls_join(tiny_model, shared_prefixes):
    """A long call runs; a short one asked after it joins the running batch, is answered first,
    and both give what each gives alone (with ``shared_prefixes`` too: tasks/llm/shared_kv.py)."""
    engine = TransformersBackend(tiny_model, TransformersSettings(device="cpu", shared_prefixes=shared_prefixes))
    long = [Request.chat([{"role": "user", "content": "Tell a long story."}], max_tokens=300, temperature=0.8, seed=1)]
    short = [Request.chat([{"role": "user", "content": "Name a colour."}], max_tokens=3, temperature=0.8, seed=2)]
    alone = engine.generate_batch(long), engine.generate_batch(short)
    assert alone[0][0][0].completion_tokens == 300  # a random model never stops on its own

    async def both():
        first = asyncio.ensure_future(engine.agenerate_batch(long))
        await asyncio.sleep(0.05)  # the long call is decoding
        second = asyncio.ensure_future(engine.agenerate_batch(short))
        done, _ = await asyncio.wait([first, second], return_when=asyncio.FIRST_COMPLETED)
        assert done == {second}
        return await first, await second

    together = asyncio.run(both())
    assert_same_completions(alone[0], together[0], LOGPROB_TOL)
    assert_same_completions(alone[1], together[1], LOGPROB_TOL)


def test_a_bad_request_fails_its_own_call_and_the_engine_goes_on(tiny_model):
    engine = TransformersBackend(tiny_model, TransformersSettings(device="cpu"))
    bad = Request.chat([{"role": "user", "content": "Hi."}], max_tokens=0)
    with pytest.raises(ValueError, match="request 0: n and max_tokens must be >= 1"):
        engine.generate_batch([bad])
    requests = [Request.chat([{"role": "user", "content": "Hi."}], max_tokens=2)]
    [[answer]] = engine.generate_batch(requests)
    assert answer.completion_tokens == 2
    assert engine.computed_tokens(requests) == answer.prompt_tokens  # no prefix stored yet for it


def test_a_model_that_cannot_load_fails_every_call_and_leaves_no_thread_behind(tmp_path):
    engine = TransformersBackend(str(tmp_path / "no-such-model"), TransformersSettings(device="cpu"))
    request = [Request.chat([{"role": "user", "content": "Hi."}], max_tokens=2)]
    for _ in range(2):  # the second call tries again rather than wait on a thread that died
        with pytest.raises(OSError):
            engine.generate_batch(request)
    assert engine._decoder._thread is None
