"""SEPR benchmark: plan pairs scored per second from cached embeddings; 10,000 sub-questions embedded.

Plan pairs: every bundled MuSiQue gold plan (symbolic steps rewritten by the templates) against
predicted plans made from it (permuted, a step dropped, a step of another plan added, paraphrased by
the template of another relation), cycled to ``--pairs`` pairs. The embeddings are computed once
beforehand, so the timed part is what a GRPO step pays per batch once its texts are cached:
normalisation, cache lookups, the similarity matrix and the Hungarian matching. Target (a GRPO step
must not wait on its reward): >= 10,000 pairs per second, i.e. ``--pairs`` pairs in pairs / 10,000
seconds; median of 3 runs. The same pairs through ``sepr_reward`` (parsing the completions too) are
reported beside it.

Embedding: ``--texts`` distinct sub-questions, the relation templates of ``plan_rewrite`` filled
with passage titles of the bundled corpora, embedded by all-MiniLM-L6-v2 on the CPU into an empty
cache; the time is reported (no target), as is the model's load time.
Run: .venv/bin/python benchmarks/sepr.py [--pairs N] [--texts N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import median_seconds, report  # noqa: E402

from ragfactory.tasks.data.loaders import load_bundled  # noqa: E402
from ragfactory.tasks.retrieval.dense import load_embedder  # noqa: E402
from ragfactory.tasks.rewards.embedding_cache import EmbeddingCache  # noqa: E402
from ragfactory.tasks.rewards.sepr import PlanScorer, SeprConfig  # noqa: E402
from ragfactory.tasks.search.apex.plan_rewrite import RELATION_TEMPLATES, rewrite_steps  # noqa: E402
from ragfactory.tasks.search.apex.training import sepr_reward  # noqa: E402

TARGET_PAIRS_PER_S = 10_000


def gold_plans() -> list[list[str]]:
    return [rewrite_steps([s["question"] for s in q["gold_plan"]]) for q in load_bundled("musique").questions]


def plan_pairs(plans: list[list[str]], n: int, rng: random.Random) -> list[tuple[list[str], list[str]]]:
    """(predicted, gold) pairs: each gold plan against perturbed copies of itself."""
    templates = list(RELATION_TEMPLATES.values())
    pairs = []
    while len(pairs) < n:
        gold = plans[len(pairs) % len(plans)]
        predicted = list(gold)
        kind = len(pairs) // len(plans) % 4
        if kind == 0:
            rng.shuffle(predicted)
        elif kind == 1 and len(predicted) > 1:
            predicted.pop(rng.randrange(len(predicted)))
        elif kind == 2:
            predicted.append(rng.choice(rng.choice(plans)))
        else:
            predicted[0] = rng.choice(templates).format(s="#1", relation="part")
        pairs.append((predicted, gold))
    return pairs


def sub_questions(n: int, rng: random.Random) -> list[str]:
    """``n`` distinct natural sub-questions: relation templates filled with passage titles."""
    names = ("hotpotqa", "2wikimultihopqa", "musique")
    titles = sorted({p["title"] for name in names for p in load_bundled(name).passages})
    templates = RELATION_TEMPLATES.values()
    texts = sorted({t.format(s=title, relation="part") for t in templates for title in titles})
    if len(texts) < n:
        raise SystemExit(f"only {len(texts)} distinct sub-questions available, asked for {n}")
    return rng.sample(texts, n)


def completion(plan: list[str]) -> str:
    return "<plan>\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(plan, 1)) + "\n</plan>"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--texts", type=int, default=10_000)
    args = parser.parse_args()
    rng = random.Random(0)
    load_1m = os.getloadavg()[0]

    start = time.perf_counter()
    embedder = load_embedder("all-MiniLM-L6-v2", device="cpu")
    load_s = time.perf_counter() - start
    texts = sub_questions(args.texts, rng)
    cold = EmbeddingCache(embedder)
    start = time.perf_counter()
    cold.vectors(texts)
    embed_s = time.perf_counter() - start

    pairs = plan_pairs(gold_plans(), args.pairs, rng)
    scorer = PlanScorer(EmbeddingCache(embedder), SeprConfig())
    scorer.score_many(pairs)  # warms the cache: every text of every pair embedded once
    score_s = median_seconds(lambda: scorer.score_many(pairs), repeats=3)
    gold_json = [json.dumps(gold) for _, gold in pairs]
    completions = [completion(predicted) for predicted, _ in pairs]
    reward = partial(sepr_reward, scorer=scorer)
    reward_s = median_seconds(lambda: reward(["p"] * len(pairs), completions, gold_plan=gold_json), repeats=3)
    f1 = [m.f1 for m in scorer.score_many(pairs)]

    target_s = args.pairs / TARGET_PAIRS_PER_S
    report(
        "sepr",
        [
            {
                "benchmark": f"SEPR, {args.pairs:,} plan pairs, cached embeddings (median of 3)",
                "measured_s": round(score_s, 3),
                "target_s": target_s,
                "pairs_per_s": round(args.pairs / score_s),
                "mean_f1": round(sum(f1) / len(f1), 3),
                "distinct_texts": len(scorer.cache),
                "cpu_load_1m": load_1m,
            },
            {
                "benchmark": f"sepr_reward (TRL), {args.pairs:,} completions incl. parsing (median of 3)",
                "measured_s": round(reward_s, 3),
                "pairs_per_s": round(args.pairs / reward_s),
            },
            {
                "benchmark": f"embed {args.texts:,} sub-questions, all-MiniLM-L6-v2 on CPU",
                "measured_s": round(embed_s, 2),
                "texts_per_s": round(args.texts / embed_s),
                "model_load_s": round(load_s, 2),
                "batch_size": embedder.batch_size,
                "cpu_load_1m": load_1m,
            },
        ],
    )


if __name__ == "__main__":
    main()
