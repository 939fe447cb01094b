"""Decontamination benchmark: 100,000 synthetic training questions against 10,000 evaluation ones.

The questions are multi-hop templates (comparisons, bridges, relations of relations) filled with
pseudo-word entities, so templates repeat across thousands of questions as they do in 2Wiki or
MuSiQue while the entities make each question distinct. 1,000 of the training questions are
planted near-duplicates of evaluation questions, 200 of each kind: re-cased, re-punctuated, a
word inserted, a word dropped (a word of the question, never of a name: without one of its
words a name is another entity), the two clauses swapped. The rest are clean: generated apart
and never equal, after normalisation, to an evaluation question.

Measured (targets of the decontamination stage):
- exact + n-gram stages over all 100,000 x 10,000, on 2 CPU cores: <= 60 s;
- recall on the planted duplicates (flagged and naming the evaluation question they copy):
  >= 0.99, for exact + n-gram alone and with the embedding stage behind them;
- clean questions flagged: <= 0.1 %.
The embedding stage (all-MiniLM-L6-v2 on CPU, faiss) is reported apart: it embeds the 10,000
evaluation questions, the planted duplicates the first stages let through and ``--embed-sample``
clean questions (embedding all 99,000 would take the better part of an hour on two cores), and
its throughput gives the time for the full set.
Run: .venv/bin/python benchmarks/decontamination.py [--train N] [--eval N] [--planted N] [--embed-sample N]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

from ragfactory.tasks.export.contamination import ContaminationConfig, EvalSet, find_contamination  # noqa: E402
from ragfactory.tasks.export.ngrams import normalize_questions  # noqa: E402

TARGET_S = 60.0
TEMPLATES = [
    ("Who was born first", "{a} or {b}"),
    ("Which film came out first", "{a} or {b}"),
    ("Are {a} and {b} from the same country", None),
    ("What is the date of death of the director of film {a}", None),
    ("Where was the father of {a} born", None),
    ("Which university did the author of {a} attend", "the novel adapted into the film {b}"),
    ("What is the name of the band whose lead singer was born in {a}", "the town twinned with {b}"),
    ("In what year was the company that makes {a} founded", "according to the annual report of {b}"),
    ("Who is the spouse of the performer of {a}", "the song that topped the charts in {b}"),
    ("When did the team coached by {a} last win the league", "before its merger with {b}"),
    ("How many episodes were in the series in which {a} played the detective", "created by {b}"),
    ("What river flows through the city where {a} was founded", "the rival of {b}"),
]
FILLERS = ["exactly", "actually", "really", "originally", "first", "ever", "still", "officially"]
KINDS = ("recased", "repunctuated", "word_inserted", "word_dropped", "clauses_swapped")


def pseudo_words(n: int, rng: random.Random) -> list[str]:
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["qua", "ther", "lin", "mor", "sel"]
    words = set()
    while len(words) < n:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))).capitalize())
    return sorted(words)


def entity(words: list[str], rng: random.Random) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(2, 3)))


def question(words: list[str], rng: random.Random) -> tuple[str, str | None]:
    """A question as (main clause, second clause or None)."""
    main, second = rng.choice(TEMPLATES)
    slots = {"a": entity(words, rng), "b": entity(words, rng)}
    return main.format(**slots), second.format(**slots) if second else None


def text(main: str, second: str | None) -> str:
    return f"{main}, {second}?" if second else f"{main}?"


def perturb(main: str, second: str | None, kind: str, rng: random.Random) -> str:
    if kind == "recased":
        return rng.choice([str.upper, str.lower, str.title])(text(main, second))
    if kind == "repunctuated":
        return f'"{main}" -- {second}!' if second else f"{main} ...!"
    words = text(main, second).split()
    if kind == "word_inserted":
        words.insert(rng.randint(1, len(words) - 1), rng.choice(FILLERS))
        return " ".join(words)
    if kind == "word_dropped":  # a word of the question, not of a name: "Gazujeso Nugodeve" minus
        # "Gazujeso" is another entity, and the question another question
        del words[rng.choice([i for i in range(1, len(words) - 1) if words[i].islower()])]
        return " ".join(words)
    if second is None and " and " in main:  # "Are A and B from ...": the two sides swap
        head, rest = main.split(" ", 1)
        left, right = rest.split(" and ", 1)
        right, _, tail = right.partition(" from ")
        return f"{head} {right} and {left} from {tail}?"
    if second is None:  # one clause: its last "of" phrase moves to the front
        head, _, tail = main.rpartition(" of ")
        return f"Of {tail}, {head[0].lower()}{head[1:]}?"
    return f"{second[0].upper()}{second[1:]}, {main[0].lower()}{main[1:]}?"


def dataset(n_train: int, n_eval: int, n_planted: int, seed: int = 0):
    """(evaluation texts, clean training texts, planted texts, the evaluation index each copies)."""
    rng = random.Random(seed)
    words = pseudo_words(20_000, rng)
    wanted = n_train - n_planted + n_eval
    drafts = [question(words, rng) for _ in range(wanted + wanted // 20)]
    norms = normalize_questions([text(*d) for d in drafts]).to_list()
    firsts = list({norm: index for index, norm in reversed(list(enumerate(norms)))}.values())[::-1]
    if len(firsts) < wanted:
        raise SystemExit(f"only {len(firsts)} distinct questions generated, {wanted} needed")
    clauses = [drafts[i] for i in sorted(firsts)[:wanted]]  # distinct after normalisation
    evaluation, clean = clauses[:n_eval], clauses[n_eval:]
    sources = rng.sample(range(n_eval), n_planted)
    planted = [perturb(*evaluation[s], KINDS[i % len(KINDS)], rng) for i, s in enumerate(sources)]
    return [text(*c) for c in evaluation], [text(*c) for c in clean], planted, sources


def scores(found, n_clean: int, sources: list[int], planted_range: slice):
    """(recall on planted with the right evaluation question, per-kind recall, clean flagged)."""
    hits = dict(zip(found["train"].to_list(), found["eval"].to_list()))
    correct = [hits.get(planted_range.start + i) == s for i, s in enumerate(sources)]
    by_kind = {k: float(np.mean(correct[i :: len(KINDS)])) for i, k in enumerate(KINDS)}
    clean_flagged = sum(1 for t in hits if t < n_clean)
    return float(np.mean(correct)), by_kind, clean_flagged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--train", type=int, default=100_000)
    parser.add_argument("--eval", type=int, default=10_000)
    parser.add_argument("--planted", type=int, default=1_000)
    parser.add_argument("--embed-sample", type=int, default=5_000)
    args = parser.parse_args()
    evaluation, clean, planted, sources = dataset(args.train, args.eval, args.planted)
    train = clean + planted  # 99,000 clean then 1,000 planted
    eval_set = EvalSet(
        tuple(f"e{i}" for i in range(len(evaluation))), tuple(evaluation), ("synthetic",) * len(evaluation)
    )
    load_1m = os.getloadavg()[0]
    start = time.perf_counter()
    found = find_contamination(train, eval_set, ContaminationConfig(embedding=False))
    lexical_s = time.perf_counter() - start
    planted_at = slice(len(clean), len(train))
    recall, by_kind, clean_flagged = scores(found, len(clean), sources, planted_at)
    rows = [
        {
            "benchmark": f"exact + {ContaminationConfig().ngram.n}-gram, {len(train):,} x {len(evaluation):,}",
            "measured_s": round(lexical_s, 2),
            "target_s": TARGET_S,
            "recall_planted": round(recall, 4),
            "clean_flagged": clean_flagged,
            "clean_flagged_pct": round(100 * clean_flagged / len(clean), 4),
            **{f"recall_{k}": round(v, 3) for k, v in by_kind.items()},
            "cpu_load_1m": round(load_1m, 2),
        }
    ]
    rows.append(
        embedding_stage(
            train, eval_set, found, len(clean), sources, planted_at, args.embed_sample, round(recall * len(sources))
        )
    )
    report("decontamination", rows)


def embedding_stage(train, eval_set, found, n_clean, sources, planted_at, sample: int, lexical_correct: int) -> dict:
    """The cascade's third stage on what the first two let through: throughput and detection."""
    from ragfactory.tasks.export.contamination import match_embeddings
    from ragfactory.tasks.retrieval.dense import load_embedder
    from ragfactory.tasks.rewards.embedding_cache import EmbeddingCache

    flagged = set(found["train"].to_list())
    rng = random.Random(1)
    clean_sample = rng.sample([i for i in range(n_clean) if i not in flagged], sample)
    missed = [i for i in range(planted_at.start, planted_at.stop) if i not in flagged]
    cache = EmbeddingCache(load_embedder("all-MiniLM-L6-v2", device="cpu"))
    start = time.perf_counter()
    cache.vectors(list(eval_set.questions))
    near = match_embeddings(
        [train[i] for i in clean_sample + missed], eval_set.questions, cache, ContaminationConfig().cosine
    )
    embed_s = time.perf_counter() - start
    n_texts = len(eval_set.questions) + len(clean_sample) + len(missed)
    hits = {(clean_sample + missed)[t]: e for t, e in zip(near["train"].to_list(), near["eval"].to_list())}
    recovered = sum(1 for i in missed if hits.get(i) == sources[i - planted_at.start])
    clean_hits = sum(1 for i in clean_sample if i in hits)
    per_s = n_texts / embed_s
    return {
        "benchmark": f"embedding stage (MiniLM, cosine >= {ContaminationConfig().cosine}), {n_texts:,} texts embedded",
        "measured_s": round(embed_s, 1),
        "texts_per_s": round(per_s, 1),
        "full_set_s": round((len(eval_set.questions) + n_clean) / per_s),
        "planted_left_by_lexical": len(missed),
        "planted_recovered": recovered,
        "recall_planted_all_stages": round((lexical_correct + recovered) / len(sources), 4),
        "clean_sample": len(clean_sample),
        "clean_sample_flagged_pct": round(100 * clean_hits / len(clean_sample), 3),
    }


if __name__ == "__main__":
    main()
