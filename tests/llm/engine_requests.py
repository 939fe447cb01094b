"""Requests shaped like a search tree's, shared by the engine's comparison tests (prefix reuse,
KV buffers, shared prefixes): one long instruction, two levels of history, greedy and sampled
rows, and a stranger; and the comparison two engines that move floats are held to."""

from __future__ import annotations

from ragfactory.tasks.llm.types import Request

# two engines that move floats (other batch widths, prefix reuse, shared prefixes) within it
LOGPROB_TOL = 1e-3

SYSTEM = "You answer questions by searching. " + " ".join(f"Rule {i}: check fact {i} twice." for i in range(24))


def tree_requests(grammar=None) -> list[Request]:
    """Two levels of a search tree under one long instruction, greedy and sampled, and a stranger."""
    root = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Who wrote Moby-Dick?"}]
    requests = []
    for k in range(2):
        node = root + [
            {"role": "assistant", "content": f"<search>whale novel {k}</search>"},
            {"role": "user", "content": f"Passage {k}: Herman Melville wrote it in 1851."},
        ]
        for j in range(2):
            child = node + [{"role": "assistant", "content": f"<search>Melville {j}</search>"}]
            child += [{"role": "user", "content": f"Passage {j}: more about {k} and {j}."}]
            sampled = {"temperature": 0.9, "seed": 10 * k + j, "n": 2} if j else {}
            held = {"grammar": grammar, "max_tokens": grammar.max_tokens} if grammar and k else {"max_tokens": 10}
            requests.append(Request.chat(child, **held, **sampled))
    requests.append(Request.chat([{"role": "user", "content": "Name a colour."}], max_tokens=6, temperature=0.7))
    return requests


def assert_same_completions(off, on, tolerance: float = LOGPROB_TOL) -> None:
    """The same token ids, texts and finish reasons per row, log-probs within ``tolerance``."""
    for row_off, row_on in zip(off, on, strict=True):
        for a, b in zip(row_off, row_on, strict=True):
            assert a.completion_token_ids == b.completion_token_ids, (a.text, b.text)
            assert a.text == b.text and a.finish_reason == b.finish_reason
            drift = [abs(x - y) for x, y in zip(a.completion_logprobs, b.completion_logprobs, strict=True)]
            assert max(drift, default=0.0) <= tolerance


def assert_tree_agrees(a, b, grammar=None) -> None:
    """``tree_requests`` (under ``grammar``) through engines ``a`` and ``b``: the same completions."""
    requests = tree_requests(grammar=grammar)
    assert_same_completions(a.generate_batch(requests), b.generate_batch(requests))
