"""The transformers backend: per-row sampling, fingerprints, and (slow) the real SmolLM2 on CPU."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace

import pytest
import torch

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.transformers_backend import (
    TransformersBackend,
    TransformersSettings,
    checkpoint_fingerprint,
    sample_tokens,
)
from ragfactory.tasks.llm.types import Request


def generators(*seeds: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(s) for s in seeds]


def test_greedy_rows_take_the_argmax():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, 1.0]])
    assert sample_tokens(logits, [0.0, 0.0], [1.0, 1.0], generators(1, 2)).tolist() == [1, 0]


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_a_row_samples_the_same_token_whatever_its_batch_mates(top_p):
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    alone = [int(sample_tokens(logits[i : i + 1], [0.8], [top_p], generators(100 + i))[0]) for i in range(6)]
    temperatures = [0.8, 0.0, 0.8, 1.5, 0.8, 0.8]
    top_ps = [top_p, 1.0, top_p, 0.5, top_p, top_p]
    batch = sample_tokens(logits, temperatures, top_ps, generators(*range(100, 106)))
    assert [int(batch[i]) for i in (0, 2, 4, 5)] == [alone[i] for i in (0, 2, 4, 5)]
    assert int(batch[1]) == int(logits[1].argmax())


def test_tiny_top_p_keeps_only_the_most_likely_token():
    logits = torch.tensor([[0.0, 2.0, 1.9, 1.8]] * 20)
    tokens = sample_tokens(logits, [1.0] * 20, [1e-6] * 20, generators(*range(20)))
    assert set(tokens.tolist()) == {1}


def test_sampling_follows_the_distribution():
    probs = torch.tensor([0.1, 0.6, 0.3])
    logits = probs.log().repeat(3000, 1)
    tokens = sample_tokens(logits, [1.0] * 3000, [1.0] * 3000, generators(*range(3000)))
    freq = torch.bincount(tokens, minlength=3).float() / 3000
    assert torch.allclose(freq, probs, atol=0.03)


def test_fingerprint_follows_weights_and_dtype(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    weights = folder / "model.safetensors"
    weights.write_bytes(bytes(5 << 20))
    base = checkpoint_fingerprint(str(folder), "float32")
    assert base == checkpoint_fingerprint(str(folder), "float32")
    assert base != checkpoint_fingerprint(str(folder), "bfloat16")
    with weights.open("r+b") as handle:  # a fine-tune changes weights everywhere; one sampled chunk
        handle.seek(len(bytes(5 << 20)) - 10)
        handle.write(b"\1")
    assert checkpoint_fingerprint(str(folder), "float32") != base


# ---- the real embedded model (slow) -------------------------------------------------------


@pytest.fixture(scope="module")
def smollm(embedded_model) -> TransformersBackend:
    """SmolLM2 converted once per checkout into pytest's cache folder, then loaded in < 1 s."""
    settings = TransformersSettings(device="cpu")
    backend = TransformersBackend(embedded_model, settings)
    backend.load()
    return backend


def ask(text: str, **sampling) -> Request:
    return Request.chat([{"role": "user", "content": text}], **sampling)


TAGGED = [  # one worked example: a 135M model follows a format it has just seen
    {"role": "system", "content": "Answer with the answer inside <answer></answer> tags."},
    {"role": "user", "content": "What is the capital of Italy?"},
    {"role": "assistant", "content": "<answer>Rome</answer>"},
    {"role": "user", "content": "What is the capital of France?"},
]


def parse_answer(text: str) -> str | None:
    """The tagged answer; the stop string ``</answer>`` is cut from the text by the backend."""
    found = re.fullmatch(r"\s*<answer>(.+?)(</answer>)?\s*", text, re.S)
    return found.group(1).strip() if found else None


@pytest.mark.slow
def test_batched_generation_answers_a_tagged_prompt(smollm):
    requests = [
        Request.chat(TAGGED, max_tokens=24, stop=("</answer>",)),
        Request.chat(TAGGED, max_tokens=24, stop=("</answer>",), temperature=0.7, seed=3, n=3),
        ask("Count from 1 to 30 separated by commas.", max_tokens=48, stop=("7",)),
    ]
    [tagged] = asyncio.run(Batcher(smollm).generate(requests[0]))
    tagged_batched, samples, counted = smollm.generate_batch(requests)
    assert parse_answer(tagged.text)  # lenient on content, strict on mechanics
    assert tagged.finish_reason == "stop" and tagged.prompt_tokens > 20
    assert len(samples) == 3 and all(parse_answer(c.text) for c in samples)
    assert all(c.completion_tokens <= 24 for c in samples)
    assert "7" not in counted[0].text and counted[0].finish_reason == "stop"
    assert tagged_batched[0].text == tagged.text  # greedy row in a batch equals the row alone


@pytest.mark.slow
def test_max_tokens_and_seeds(smollm):
    story = "Tell me a long story about a dragon."
    [[a], [b], [c], [short]] = smollm.generate_batch(
        [
            ask(story, max_tokens=6, temperature=1.0, seed=1),
            ask(story, max_tokens=6, temperature=1.0, seed=1),
            ask(story, max_tokens=6, temperature=1.0, seed=2),
            ask(story, max_tokens=3, temperature=1.0, seed=1),
        ]
    )
    assert a.text == b.text and a.completion_tokens == 6 and a.finish_reason == "length"
    assert a.text != c.text
    assert short.completion_tokens == 3 and short.finish_reason == "length"
    [[alone]] = smollm.generate_batch([ask(story, max_tokens=6, temperature=1.0, seed=1)])
    assert alone.text == a.text  # a node's sample does not depend on its batch-mates
    [[_, second]] = smollm.generate_batch([ask(story, max_tokens=6, temperature=1.0, seed=0, n=2)])
    assert second.text == a.text  # sample i of seed s is sample 0 of seed s + i


@pytest.mark.slow
def test_a_grammar_holds_every_sample_and_keeps_rows_independent(smollm):
    """The TreePS step prompt, constrained: every sample is a well-formed step ending in its
    closing tag, within the grammar's bound; a constrained row samples the same text beside a
    free row as alone; and the same request without its grammar is free text again."""
    from ragfactory.tasks.prompts.loader import load_grammar, render_prompt
    from ragfactory.tasks.search.treeps.steps import parse_step

    grammar = load_grammar("treeps_step", 96)
    prompt = render_prompt("treeps_step", question="Were Scott Derrickson and Ed Wood of the same nationality?")
    constrained = ask(prompt, max_tokens=96, temperature=1.0, seed=5, n=6, grammar=grammar)
    free = ask(prompt, max_tokens=96, temperature=1.0, seed=5, n=6)
    samples, loose = smollm.generate_batch([constrained, free])
    assert all(parse_step(c.text, "treeps_step").error is None for c in samples), [c.text for c in samples]
    assert all(c.finish_reason == "stop" and c.completion_tokens <= grammar.max_tokens for c in samples)
    assert all(c.text.startswith("<reason>") for c in samples)
    assert sum(c.text.startswith("<reason>") for c in loose) < 6  # the same seeds, unconstrained
    [alone] = smollm.generate_batch([replace(constrained, sampling=replace(constrained.sampling, n=1))])
    assert alone[0].text == samples[0].text


@pytest.mark.slow
def test_a_tight_kv_budget_runs_the_call_in_turns_and_changes_no_row(smollm, embedded_model):
    """The same call under a KV budget of a few rows and one prompt per prefill pass: rows join
    the running batch as others finish, prefill groups joined into one cache, and every row as
    the unbounded call gives it (greedy and seeded samples alike)."""
    tight = TransformersBackend(embedded_model, TransformersSettings(device="cpu", kv_cache_mb=6.0, prefill_tokens=40))
    requests = [
        ask("Name a colour.", max_tokens=8),
        ask("Name a large city in Europe, please.", max_tokens=8, temperature=1.0, seed=4, n=3),
        ask("What is two plus two? Answer with one word only, thank you.", max_tokens=8),
        Request.chat(TAGGED, max_tokens=8, stop=("</answer>",), temperature=0.7, seed=9, n=2),
    ]
    widths = sorted(len(smollm.encode_prompt(r)) + 8 for r in requests for _ in range(r.sampling.n))
    assert tight.kv_slots == 136 and 2 * widths[1] <= 136 < sum(widths)  # two rows at once, not seven
    bounded, unbounded = tight.generate_batch(requests), smollm.generate_batch(requests)
    assert [[c.text for c in r] for r in bounded] == [[c.text for c in r] for r in unbounded]
