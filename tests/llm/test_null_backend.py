"""The null engine: random text that always parses under the request's grammar, and is the same
text for the same request, seed and sample index (tasks/llm/null_backend.py)."""

from __future__ import annotations

import pytest

from ragfactory.tasks.llm.config import LLMRoleConfig
from ragfactory.tasks.llm.engine import make_backend
from ragfactory.tasks.llm.null_backend import NullBackend, NullSettings
from ragfactory.tasks.llm.types import Request
from ragfactory.tasks.prompts.loader import grammar_names, load_grammar
from tests.prompts.grammar_parsers import PARAMS, PARSERS

SAMPLES = 12  # walks per grammar: a few hundred in all, well under a second


@pytest.fixture(scope="module")
def null(embedded_model) -> NullBackend:
    backend = NullBackend(embedded_model)
    backend.load()
    return backend


def _ask(content: str, **sampling) -> Request:
    return Request.chat([{"role": "user", "content": content}], **sampling)


def test_every_prompt_grammar_has_a_parser_here():
    assert sorted(PARSERS) == grammar_names()


@pytest.mark.parametrize("max_tokens", [160, 320])
def test_every_output_parses_under_its_grammar(null, max_tokens):
    for name in grammar_names():
        grammar = load_grammar(name, max_tokens, **PARAMS.get(name, {}))
        answers = null.generate_batch(
            [_ask(f"q{seed}", grammar=grammar, max_tokens=max_tokens, n=3, seed=seed) for seed in range(SAMPLES // 3)]
        )
        for completion in (c for answer in answers for c in answer):
            assert PARSERS[name](completion.text) is None, (name, completion.text)
            assert completion.finish_reason == "stop"
            assert 0 < completion.completion_tokens <= max_tokens


def test_same_seed_same_text_and_samples_differ(null):
    grammar = load_grammar("decex_termination", 128, outcome="decision")
    request = _ask("Who directed Jaws?", grammar=grammar, max_tokens=128, n=4, seed=7)
    first, again = null.generate_batch([request]), null.generate_batch([request])
    assert [c.text for c in first[0]] == [c.text for c in again[0]]
    assert len({c.text for c in first[0]}) > 1, "every sample of a request came out the same"
    # sample i of seed s is sample 0 of seed s + i, as with the real engines
    shifted = null.generate_batch([_ask("Who directed Jaws?", grammar=grammar, max_tokens=128, n=1, seed=9)])
    assert shifted[0][0].text == first[0][2].text
    other = null.generate_batch([_ask("Who directed Alien?", grammar=grammar, max_tokens=128, n=4, seed=7)])
    assert [c.text for c in other[0]] != [c.text for c in first[0]]


def test_free_requests_keep_max_tokens_and_stop_strings(null):
    long = null.generate_batch([_ask("x", max_tokens=5, n=40, seed=1)])[0]
    assert all(c.completion_tokens <= 5 for c in long)
    assert {c.finish_reason for c in long} == {"stop", "length"}  # 0.15 a step: both within 40 samples
    stopped = null.generate_batch([_ask("x", max_tokens=64, n=40, seed=1, stop=("e",))])[0]
    assert all("e" not in c.text for c in stopped)
    assert any(c.finish_reason == "stop" and c.completion_tokens > len(c.text.split()) for c in stopped)


def test_the_fingerprint_is_no_real_models(null, embedded_model):
    assert null.fingerprint.startswith("null/")
    assert NullBackend(embedded_model, NullSettings(close_rate=0.5)).fingerprint != null.fingerprint


def test_the_config_names_it_and_a_wrong_option_is_named(embedded_model):
    role = LLMRoleConfig(backend="null", model=str(embedded_model), options={"close_rate": 0.3})
    assert make_backend(role, None).settings == NullSettings(close_rate=0.3)
    with pytest.raises(ValueError, match=r"\['temperature'\] are not settings of the null backend"):
        make_backend(LLMRoleConfig(backend="null", model=str(embedded_model), options={"temperature": 1}), None)
