"""Rollout cost of a TreePS-RAG tree against N independent trajectories (§2.2, Eq. 2).

The paper sizes the tree so that "the overall rollout cost remains comparable to sampling N
independent trajectories". This script expands the same questions three ways with one scripted
policy: the default tree (N = 8, D = 4, N_retain = 2, B_d by Eq. 2), Table 3's "Larger Tree"
(fixed B_d = 9, 7, 5, 1, N_retain = 3), and N = 8 independent trajectories of at most D steps
(the same code with B_d = 8, 1, 1, 1 and every search kept, so the only difference is the tree).

The policy is random but fixed by each request's seed: at step d it answers with probability
0.25, 0.4, 0.55, 0.7 (d = 1..4) ("answers early"; "searches to D" never answers, the longest
trajectories), writes a malformed step 3 % of the time and searches otherwise;
reasoning runs 40-160 tokens, a query 4-10, an answer 1-4; each search returns 3 passages of
100 tokens drawn from a pool of 12 per question, so sibling searches sometimes overlap.

How tokens are counted: one whitespace-separated word is one token. ``decode`` sums the tokens
of every generated step, pruned ones included (they were generated). ``prefill`` sums the prompt
tokens of every request once: a parent's B_d samples are one request sharing its prompt, as
an engine with n > 1 or prefix caching processes them; ``prefill_per_sample`` counts the prompt
once per sample, an engine without sharing. Per question, mean over the questions.

``decode_ratio`` and ``prefill_ratio`` divide by the independent trajectories of the same policy.

Run: COLUMNS=250 .venv/bin/python benchmarks/treeps_tokens.py [--questions 64]
Writes benchmarks/results/treeps_tokens.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

from ragfactory.tasks.llm.batcher import Batcher  # noqa: E402
from ragfactory.tasks.llm.types import Completion, Request  # noqa: E402
from ragfactory.tasks.retrieval.types import Hit  # noqa: E402
from ragfactory.tasks.search.treeps.expansion import TreePSConfig, expand_question  # noqa: E402

POLICIES = {"answers early": (0.25, 0.4, 0.55, 0.7), "searches to D": (0.0, 0.0, 0.0, 0.0)}
MALFORMED_P = 0.03
VARIANTS = {
    "tree (N=8, D=4, N_retain=2)": TreePSConfig(),
    "larger tree (9,7,5,1, N_retain=3)": TreePSConfig(branching=(9, 7, 5, 1), n_retain=3),
    "independent (8 trajectories)": TreePSConfig(branching=(8, 1, 1, 1), n_retain=8),
}


def words(n: int, word: str = "w") -> str:
    return " ".join([word] * n)


class RandomPolicy:
    """A ``Backend`` whose sample i of a request is drawn from the seed ``seed + i``."""

    fingerprint = "treeps-token-policy"

    def __init__(self, answer_p: tuple[float, ...]):
        self.answer_p = answer_p
        self.decode = 0
        self.prefill = 0
        self.prefill_per_sample = 0
        self.samples = 0

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        out = []
        for request in requests:
            prompt = sum(len(m.content.split()) for m in request.messages)
            self.prefill += prompt
            self.prefill_per_sample += prompt * request.sampling.n
            out.append([self.step(request, i, prompt) for i in range(request.sampling.n)])
        return out

    def step(self, request: Request, sample: int, prompt_tokens: int) -> Completion:
        rng = random.Random(request.sampling.seed + sample)
        depth = sum(m.role == "assistant" for m in request.messages) + 1
        reasoning = f"<reason> {words(rng.randint(40, 160))} </reason>"
        roll = rng.random()
        if roll < MALFORMED_P:
            text = words(rng.randint(40, 160))
        elif roll < MALFORMED_P + self.answer_p[min(depth, len(self.answer_p)) - 1]:
            text = f"{reasoning} <answer> {words(rng.randint(1, 4), 'gold')} </answer>"
        else:
            text = f"{reasoning} <search> {words(rng.randint(4, 10), f'q{rng.randrange(6)}')} </search>"
        tokens = len(text.split())
        self.decode += tokens
        self.samples += 1
        return Completion(text, prompt_tokens=prompt_tokens, completion_tokens=tokens)


class PoolRetriever:
    """Three 100-token passages per query, drawn from 12 per question by the query's hash."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        out = []
        for query in queries:
            rng = random.Random(hashlib.sha256(query.encode()).digest())
            ids = rng.sample(range(12), k)
            out.append([Hit(f"p{i}", f"T{i}", words(98, "x"), 1.0) for i in ids])
        return out


def expand(config: TreePSConfig, answer_p: tuple[float, ...], n_questions: int) -> dict:
    policy = RandomPolicy(answer_p)
    batcher = Batcher(policy)
    questions = [
        {"question_id": f"q{i}", "question": f"Question {i}?", "golden_answers": ["gold"]} for i in range(n_questions)
    ]

    async def main():
        jobs = [lambda q=q: expand_question(q, batcher, PoolRetriever(), config, "bench", 0) for q in questions]
        return await batcher.run_all(jobs, max_in_flight=n_questions)

    trees = asyncio.run(main())
    per_q = 1 / n_questions
    return {
        "steps_per_q": round(policy.samples * per_q, 1),
        "decode_tokens_per_q": round(policy.decode * per_q),
        "prefill_tokens_per_q": round(policy.prefill * per_q),
        "prefill_per_sample_per_q": round(policy.prefill_per_sample * per_q),
        "trajectories_per_q": round(sum(len(t.rollouts) for t in trees) * per_q, 1),
        # every answer is right, so V(root) is the share of trajectories that answered
        "answered_share": round(sum(t.nodes[0].value or 0 for t in trees) * per_q, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=64)
    args = parser.parse_args()
    rows = []
    for policy, answer_p in POLICIES.items():
        measured = {name: expand(config, answer_p, args.questions) for name, config in VARIANTS.items()}
        base = measured["independent (8 trajectories)"]
        for name, values in measured.items():
            rows.append(
                {
                    "policy": policy,
                    "variant": name,
                    "questions": args.questions,
                    **values,
                    "decode_ratio": round(values["decode_tokens_per_q"] / base["decode_tokens_per_q"], 2),
                    "prefill_ratio": round(values["prefill_tokens_per_q"] / base["prefill_tokens_per_q"], 2),
                }
            )
    report("treeps_tokens", rows)


if __name__ == "__main__":
    main()
