"""Structured generation on the embedded model: well-formed share and decode speed, free vs held.

For every prompt kind that expects tagged output, ``--samples`` completions (eight bundled
HotpotQA or MuSiQue questions, ``n`` samples each, temperature 0.7 as the strategies sample)
are generated twice by the embedded SmolLM2-135M on CPU: freely, and held to the prompt's
grammar. Each row reports the share of outputs the strategy's parser accepts and the decode
throughput (completion tokens per second of engine time, prompts' prefill included).

Goals (structured generation must not cost the build): constrained parse share >= 0.99, and
constrained tokens/s >= 0.85 x free tokens/s. ``ratio`` columns are measured / goal (above 1
meets it). Engine calls go straight to the backend, without the cache, so every run generates.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import report  # noqa: E402
from ragfactory.tasks.data.loaders import load_bundled  # noqa: E402
from ragfactory.tasks.eval.baselines import free_answer  # noqa: E402
from ragfactory.tasks.llm.embedded import embedded_model_path  # noqa: E402
from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings  # noqa: E402
from ragfactory.tasks.llm.types import Message, Request, Sampling  # noqa: E402
from ragfactory.tasks.prompts.loader import load_grammar, render_prompt  # noqa: E402
from ragfactory.tasks.retrieval.types import Hit  # noqa: E402
from ragfactory.tasks.search import parsing  # noqa: E402
from ragfactory.tasks.search.apex.execute import parse_decision  # noqa: E402
from ragfactory.tasks.search.apex.plan_format import parse_plan, planner_prompt  # noqa: E402
from ragfactory.tasks.search.decex import history  # noqa: E402
from ragfactory.tasks.search.decex import steps as decex_steps  # noqa: E402
from ragfactory.tasks.search.mcts.steps import grounding_input, parse_turn, reasoning_input  # noqa: E402
from ragfactory.tasks.search.treeps.steps import initial_prompt, parse_step  # noqa: E402
from ragfactory.warehouse.store import Warehouse  # noqa: E402

QUESTIONS = 8
TEMPERATURE = 0.7
GOAL_SHARE = 0.99
GOAL_SPEED = 0.85
NONE = "None"


def _user(text: str) -> tuple[Message, ...]:
    return (Message("user", text),)


def _system(system: str, user: str) -> tuple[Message, ...]:
    return (Message("system", system), Message("user", user))


def _apex(name: str, q: str, hits: str) -> str:
    values = {"sub_question": q, "knowledge": NONE}
    if name == "apex_sub_answer":
        values["documents"] = hits
    return render_prompt(name, **values)


# kind -> (messages of a question, parser: text -> error or None, grammar parameters, max_tokens)
KINDS = {
    "decex_termination": (
        lambda q, d: _user(history.termination_prompt(q, [])),
        lambda t: decex_steps.parse_termination(t).error,
        {"outcome": "decision"},
        128,
    ),
    "decex_sub_question": (
        lambda q, d: _user(history.sub_question_prompt(q, [])),
        lambda t: decex_steps.parse_sub_question(t).error,
        {},
        96,
    ),
    "decex_self_answer": (
        lambda q, d: _user(history.self_answer_prompt(q)),
        lambda t: decex_steps.parse_self_answer(t).error,
        {},
        96,
    ),
    "decex_sub_query": (
        lambda q, d: _user(history.sub_query_prompt(q)),
        lambda t: decex_steps.parse_sub_query(t).error,
        {},
        32,
    ),
    "decex_rollout": (
        lambda q, d: _user(history.rollout_prompt(q, [])),
        lambda t: parsing.parse_rollout_turn(t).error,
        {},
        96,
    ),
    "treeps_step": (
        lambda q, d: _user(initial_prompt(q, "treeps_step")),
        lambda t: parse_step(t, "treeps_step").error,
        {},
        96,
    ),
    "apex_plan": (lambda q, d: _user(planner_prompt(q, 3)), lambda t: parse_plan(t, 3).error, {"max_steps": 3}, 192),
    "apex_sufficiency": (
        lambda q, d: _user(_apex("apex_sufficiency", q, d)),
        lambda t: parse_decision(t, "sufficiency").error,
        {},
        96,
    ),
    "apex_query_first": (
        lambda q, d: _user(_apex("apex_query_first", q, d)),
        lambda t: decex_steps.parse_sub_query(t).error,
        {},
        96,
    ),
    "apex_sub_answer": (
        lambda q, d: _user(_apex("apex_sub_answer", q, d)),
        lambda t: decex_steps.parse_self_answer(t).error,
        {},
        96,
    ),
    "reasonrag_reasoning": (
        lambda q, d: _system(render_prompt("reasonrag_reasoning", answer_format="answer"), reasoning_input(q, [])),
        lambda t: parse_turn(t).error,
        {},
        96,
    ),
    "reasonrag_grounding": (
        lambda q, d: _system(render_prompt("reasonrag_grounding"), grounding_input(q, ["<query>x</query>"], d)),
        lambda t: parse_turn(t).error,
        {},
        96,
    ),
    "flashrag_direct": (
        lambda q, d: _system(render_prompt("flashrag_direct"), f"Question: {q}"),
        lambda t: None if free_answer(t) else "empty output",
        {},
        32,
    ),
}


def questions() -> list[tuple[str, list[Hit], str]]:
    """(question, three of its context paragraphs as hits, the same as numbered text)."""
    data = load_bundled("hotpotqa", limit=QUESTIONS)
    per_question = len(data.passages) // len(data.questions)  # HotpotQA: ten paragraphs each
    rows = []
    for i, question in enumerate(data.questions):
        own = data.passages[i * per_question : (i + 1) * per_question][:3]
        hits = [Hit(p["passage_id"], p["title"], p["text"], 1.0) for p in own]
        text = "\n".join(f"Doc {k}: {h.title}: {h.text}" for k, h in enumerate(hits, start=1))
        rows.append((question["question"], hits, text))
    return rows


def measure(backend, kind: str, samples: int, constrained: bool) -> dict:
    build, parse, params, max_tokens = KINDS[kind]
    per_question = max(1, samples // QUESTIONS)
    grammar = load_grammar(kind, max_tokens, **params) if constrained else None
    requests = []
    for i, (question, hits, text) in enumerate(questions()):
        messages = build(question, hits if kind == "reasonrag_grounding" else text)
        sampling = Sampling(n=per_question, temperature=TEMPERATURE, max_tokens=max_tokens, seed=i, grammar=grammar)
        requests.append(Request(messages, sampling))
    started = time.perf_counter()
    answers = backend.generate_batch(requests)
    seconds = time.perf_counter() - started
    outputs = [c for completions in answers for c in completions]
    tokens = sum(c.completion_tokens for c in outputs)
    return {
        "kind": kind,
        "mode": "grammar" if constrained else "free",
        "samples": len(outputs),
        "well_formed": sum(parse(c.text) is None for c in outputs) / len(outputs),
        "closed": sum(c.finish_reason == "stop" for c in outputs) / len(outputs),
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "tok_per_s": round(tokens / seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64, help="completions per kind and mode")
    parser.add_argument("--kinds", nargs="*", default=sorted(KINDS), choices=sorted(KINDS))
    args = parser.parse_args()
    model = embedded_model_path(Warehouse().artifacts_dir("models"))
    backend = TransformersBackend(model, TransformersSettings(device="cpu"))
    backend.load()
    backend.generate_batch([Request(_user("Hello"), Sampling(max_tokens=4))])  # warm-up
    rows = []
    for number, kind in enumerate(args.kinds, 1):
        free, held = measure(backend, kind, args.samples, False), measure(backend, kind, args.samples, True)
        print(
            f"[{number}/{len(args.kinds)}] {kind}: well-formed {free['well_formed']:.2f} free, "
            f"{held['well_formed']:.2f} held; {free['tok_per_s']} vs {held['tok_per_s']} tok/s",
            file=sys.stderr,
            flush=True,
        )
        held["share_ratio"] = round(held["well_formed"] / GOAL_SHARE, 3)
        held["speed_vs_free"] = round(held["tok_per_s"] / free["tok_per_s"], 3)
        held["speed_ratio"] = round(held["speed_vs_free"] / GOAL_SPEED, 3)
        rows += [free, held]
    report("structured", rows)


if __name__ == "__main__":
    main()
