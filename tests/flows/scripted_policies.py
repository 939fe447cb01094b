"""Scripted policies shared by the flow, fault, dashboard and end-to-end tests (each strategy's flow
test explains its policy's tree), and the small DecEx build they run."""

from __future__ import annotations

import re

from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.llm.types import Request
from tests.fakes import scripted_llm


def decex_policy(golden: dict[str, str]):
    """Well-formed DecEx replies; a branch that went through "fact 1" ends in a wrong answer."""

    def reply(request: Request, sample: int) -> str:
        prompt = request.messages[0].content
        gold = next((a for q, a in golden.items() if q in prompt), "unknown")
        answer = f"wrong {sample}" if "fact 1" in prompt else gold
        if len(request.messages) > 1 or "Please generate a query" not in prompt and "<search>" in prompt:
            return f"<answer>{answer}</answer>"  # rollouts
        if "Please judge based on the available information" in prompt:
            done = "Sub-question:" in prompt
            return f"<answer>{answer}</answer>" if done else f"<question>What is fact {sample}?</question>"
        if "break down the original question" in prompt:
            return f"<reasoning>step</reasoning> <question>What is fact {sample}?</question>"
        if "Please generate a query for search engines" in prompt:
            return f"fact {sample} lookup"
        return f"<answer>{answer}</answer>"

    return reply


DECEX_GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=3).questions}
# Well-formed DecEx outputs on the first three HotpotQA questions; branches through "fact 1" end wrong.
decex_hotpotqa = decex_policy(DECEX_GOLD)


def treeps_and_decex(request: Request, sample: int) -> str:
    """TreePS steps for TreePS's prompts (``tests/search/treeps/treeps_scenario.py``), DecEx replies otherwise."""
    from tests.search.treeps.treeps_scenario import mixed

    prompt = request.messages[0].content
    return mixed(request, sample) if "<reason>" in prompt else decex_hotpotqa(request, sample)


def decex_config(root, **decex) -> BuildConfig:
    """DecEx over three HotpotQA questions in two shards on the scripted engine; ``decex`` overrides."""
    return BuildConfig.model_validate(
        {
            "name": "decex-test",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "hotpotqa", "limit": 3}],
            # every question in train: this build is about DecEx itself (tests/flows/test_honest_loop.py
            # is about partitions)
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(max_in_flight=3),
            "search": {
                "strategies": ["decex"],
                "shard_size": 2,
                "decex": {"k": 2, "n_rollouts": 2, "t_max": 2, "termination_samples": 1, **decex},
            },
        }
    )


# The evaluate flow's two models (tests/flows/test_evaluate.py, test_train_process.py).
HOTPOTQA_GOLD = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa").questions}


def hotpotqa_gold(text: str) -> str:
    """The golden answer of the bundled HotpotQA question that ``text`` quotes."""
    return next(answer for question, answer in HOTPOTQA_GOLD.items() if question in text)


def trained_policy(request, sample: int) -> str:
    """ReasonRAG's format, right answers: query, evidence, answer; direct and rag answer too."""
    system, user = request.messages[0].content, request.messages[-1].content
    if "extract relevant evidence" in system:
        return "Based on the query, the relevant evidence is <evidence>the documents say so"
    if "question-answering assistant" in system:
        if "<evidence>" in user:
            return f"So the answer is <answer>{hotpotqa_gold(user)}"
        return f"So the next query is <query>{user.splitlines()[0][len('Question: ') :]}"
    return hotpotqa_gold(user)


def base_policy(request, sample: int) -> str:
    """An untrained model: no tags, no answer."""
    return "I am a small model and I do not know."


def apex_policy(request, sample: int) -> str:
    """A two-step plan for the planner; short tagged answers for every execution call."""
    prompt = request.messages[0].content
    if "<plan>" in prompt:
        return "<plan>\n1. Who performed the song?\n2. Where was #1 born?\n</plan>"
    return "<decision>yes</decision> <answer>unknown</answer>"


def mcts_policy(request, sample: int) -> str:
    system, user = request.messages[0].content, request.messages[1].content
    question = re.match(r"Question: (.*)", user).group(1)
    if "extract relevant evidence" in system:
        return "Based on the query, the relevant evidence is <evidence>The documents answer it."
    if "Previous Thoughts" not in user:
        path = dict(request.tags)["path"]
        return "So the next query is <query>" + question if path.endswith("s0") else "So the answer is <answer>Bob"
    return "So the answer is <answer>" + HOTPOTQA_GOLD[question]


def r3_policy(request, sample: int) -> str:
    path, prompt = dict(request.tags)["path"], request.messages[-1].content
    if path.endswith("/r"):
        return "So the relevance is 0.5"
    if path.endswith("/o"):
        return "So the predicted answer is correct: no"
    question = re.search(r"The question: (.*?)(?:\. The Previous Steps:|\n)", prompt).group(1)
    if path.split("/")[1] == "a1":
        return "The problem analysis: I know it.\nThe final answer: Bob"
    if "The Previous Steps:" not in prompt:
        return f"The problem analysis: Search first.\nThe retrieval query: {question}"
    return f"The problem analysis: The documents say so.\nThe final answer: {HOTPOTQA_GOLD[question]}"
