"""Per-row token sampling for the embedded engine, and the log-probability of what was sampled.

The decode loop of ``transformers_backend.py`` samples every row with its own generator
(``sample_tokens``) and records each sampled token's log-probability (``sampled_logprobs``) so a
trainer has the behaviour policy's log-probs without recomputing them (docs/tokens.md). Which
distribution that is: the one the token was drawn from, i.e. the logits with the row's grammar
mask applied (forbidden tokens at -inf), divided by the temperature, softmaxed and, when
``top_p`` < 1, cut to the nucleus and renormalised. A greedy row (temperature 0) draws nothing;
it reports the log-probability under the masked logits at temperature 1 (the model's own
distribution), the value a trainer recomputing log-probs at temperature 1 gets.
"""

from __future__ import annotations


def sample_tokens(logits, temperatures: list[float], top_ps: list[float], generators: list):
    """One token per row: greedy at temperature 0, else sampled with the row's own generator.

    Every sampling row draws one uniform number from its generator per step and inverts a CDF:
    of the vocabulary in id order when ``top_p`` is 1, of the sorted nucleus otherwise. Which
    CDF a row uses depends only on its own parameters, so its token never depends on other rows.
    """
    import torch

    tokens = logits.argmax(dim=-1)
    device = logits.device
    temperature = torch.tensor(temperatures, device=device)
    top_p = torch.tensor(top_ps, device=device)
    sampled = temperature > 0
    if not bool(sampled.any()):
        return tokens
    draws = torch.stack([torch.rand((), generator=g, device=device) for g in generators])
    for subset in (sampled & (top_p >= 1), sampled & (top_p < 1)):
        index = subset.nonzero().squeeze(-1)
        if index.numel():
            probs = torch.softmax(logits[index] / temperature[index, None], dim=-1)
            tokens[index] = _invert_cdf(probs, draws[index], top_p[index])
    return tokens


def _invert_cdf(probs, draws, top_p):
    import torch

    if bool((top_p >= 1).all()):
        ids, cdf = None, probs.cumsum(-1)
    else:
        probs, ids = probs.sort(dim=-1, descending=True)
        # drop a token once the mass before it reaches top_p (the most likely token always stays)
        cdf = probs.masked_fill((probs.cumsum(-1) - probs) >= top_p[:, None], 0.0).cumsum(-1)
    pick = torch.searchsorted(cdf, (draws * cdf[:, -1])[:, None], right=True)
    pick = pick.clamp(max=cdf.shape[-1] - 1)
    return pick.squeeze(-1) if ids is None else ids.gather(-1, pick).squeeze(-1)


def sampled_logprobs(logits, tokens, temperatures: list[float], top_ps: list[float]):
    """log p(token) per row under the distribution ``sample_tokens`` drew it from (module
    docstring); ``logits`` already masked by the row's grammar."""
    import torch

    device = logits.device
    temperature = torch.tensor(temperatures, device=device)
    top_p = torch.tensor(top_ps, device=device)
    scale = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    logps = torch.log_softmax(logits / scale[:, None], dim=-1)
    chosen = logps.gather(-1, tokens[:, None].to(device)).squeeze(-1)
    nucleus = ((temperature > 0) & (top_p < 1)).nonzero().squeeze(-1)
    if nucleus.numel():
        probs = logps[nucleus].exp().sort(dim=-1, descending=True).values
        # the mass _invert_cdf keeps: tokens whose preceding mass is below top_p
        kept = probs.masked_fill((probs.cumsum(-1) - probs) >= top_p[nucleus, None], 0.0).sum(-1)
        chosen[nucleus] = chosen[nucleus] - kept.log()
    return chosen
