"""What each engine records of its tokens (docs/tokens.md): the embedded engine's log-probability
of a sampled token, worked out by hand, and the ids and log-probs read from vLLM's and an
OpenAI-compatible server's answers (null where they send none)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from ragfactory.tasks.llm.openai_backend import parse_choices, request_body
from ragfactory.tasks.llm.sampling import sampled_logprobs
from ragfactory.tasks.llm.types import Request
from ragfactory.tasks.llm.vllm_backend import to_completions

# softmax of [2, 1, 0] is (e², e, 1) / (e² + e + 1)
LOGITS = [2.0, 1.0, 0.0]
Z = math.e**2 + math.e + 1


@pytest.mark.parametrize(
    "token, temperature, top_p, expected",
    [
        (0, 0.0, 1.0, 2 - math.log(Z)),  # greedy: the model's distribution at temperature 1
        (1, 1.0, 1.0, 1 - math.log(Z)),
        (2, 2.0, 1.0, -math.log(math.e + math.e**0.5 + 1)),  # logits halved
        (1, 1.0, 0.8, -math.log(math.e + 1)),  # nucleus {0, 1} (mass 0.91), renormalised: e / (e² + e)
    ],
)
def test_the_logprob_is_the_sampled_distributions(token, temperature, top_p, expected):
    logps = sampled_logprobs(torch.tensor([LOGITS]), torch.tensor([token]), [temperature], [top_p])
    assert logps.item() == pytest.approx(expected, abs=1e-6)


def test_a_grammar_masked_token_renormalises_over_the_allowed_ones():
    masked = torch.tensor([[2.0, 1.0, float("-inf")]])
    logps = sampled_logprobs(masked, torch.tensor([1]), [1.0], [1.0])
    assert logps.item() == pytest.approx(-math.log(math.e + 1), abs=1e-6)


def _vllm_sample(logprobs):
    return SimpleNamespace(index=0, text="ab", token_ids=[7, 9], finish_reason="stop", logprobs=logprobs)


def test_vllm_ids_and_logprobs_are_kept_as_returned():
    steps = [{7: SimpleNamespace(logprob=-0.5)}, {9: SimpleNamespace(logprob=-1.25), 3: SimpleNamespace(logprob=-0.1)}]
    [done] = to_completions(SimpleNamespace(prompt_token_ids=[1, 2], outputs=[_vllm_sample(steps)]), 0.1, "tok")
    assert (done.prompt_token_ids, done.completion_token_ids, done.completion_logprobs, done.tokenizer_fingerprint) == (
        (1, 2),
        (7, 9),
        (-0.5, -1.25),
        "tok",
    )
    [bare] = to_completions(SimpleNamespace(prompt_token_ids=None, outputs=[_vllm_sample(None)]), 0.1)
    assert (bare.prompt_token_ids, bare.completion_token_ids, bare.completion_logprobs) == (None, (7, 9), None)


def test_an_openai_answer_keeps_its_logprobs_and_the_ids_a_server_returns():
    body = request_body("m", Request.chat([{"role": "user", "content": "q"}]), logprobs=True, token_ids=True)
    assert (body["logprobs"], body["return_token_ids"]) == (True, True)
    assert "logprobs" not in request_body("m", Request.chat([{"role": "user", "content": "q"}]))
    payload = {
        "prompt_token_ids": [4, 5],
        "usage": {"prompt_tokens": 2, "completion_tokens": 2},
        "choices": [
            {
                "index": 0,
                "message": {"content": "ab"},
                "token_ids": [7, 9],
                "logprobs": {"content": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -2.0}]},
            },
            {"index": 1, "message": {"content": "cd"}},
        ],
    }
    first, second = parse_choices(payload, 0.1)
    assert (first.prompt_token_ids, first.completion_token_ids, first.completion_logprobs) == (
        (4, 5),
        (7, 9),
        (-0.5, -2.0),
    )
    assert (second.completion_token_ids, second.completion_logprobs) == (None, None)
