"""The scripted Jaws question behind the hand-worked DecEx-RAG tree of tests/search/decex/test_decex.py.

The policy answers each prompt by what it asks (which table, which history) and the sample index;
the retriever answers three fixed queries. test_decex.py works the resulting tree out by hand.
"""

from __future__ import annotations

import asyncio

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.types import Request
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.decex.expansion import DecExConfig, expand_question
from tests.fakes import FixedRetriever, ScriptedBackend

QUESTION = {
    "question_id": "jaws",
    "question": "Who is the mother of the director of Jaws?",
    "golden_answers": ["Leah Adler"],
}
CONFIG = DecExConfig(
    k=3, n_rollouts=2, t_max=2, termination_samples=3, threshold=0.75, metric="f1", rollout_max_turns=3
)

LEAH = Hit("p-leah", "Leah Adler", "Leah Adler was the mother of Steven Spielberg.", 3.0)
JAWS = Hit("p-jaws", "Jaws (film)", "Jaws is a 1975 film directed by Steven Spielberg.", 2.0)
ARNOLD = Hit("p-arnold", "Arnold Spielberg", "Arnold Spielberg was an electrical engineer.", 1.0)
RETRIEVAL = {
    "Jaws director": [JAWS],
    "Steven Spielberg mother": [LEAH, JAWS, ARNOLD],
    "Spielberg mother name": [LEAH, ARNOLD, JAWS],
}

TERMINATION = {  # by the number of steps in the history
    0: ["<reasoning>The director is unknown.</reasoning> <question>Who directed Jaws?</question>"] * 2
    + ["<reasoning>A guess.</reasoning> <answer>Leah</answer>"],
    1: ["<reasoning>His mother is unknown.</reasoning> <question>Who is his mother?</question>"] * 3,
    2: [
        "<reasoning>The documents name her.</reasoning> <answer>Leah Adler</answer>",
        "<answer> leah adler </answer>",
        "<reasoning>Check again.</reasoning> <question>Is Leah Adler his mother?</question>",
    ],
}
SUB_QUESTIONS = {
    0: [
        "First find the director. <question>Who directed Jaws?</question>",
        "<question>who directed jaws</question>",
        "Dates matter. <question>When was Jaws released?</question>",
    ],
    1: [
        "Now the mother. <question>Who is the mother of Steven Spielberg?</question>",
        "<question>Who is Spielberg's father?</question>",
        "I am not sure.",
    ],
}
SELF_ANSWERS = {
    "Who directed Jaws?": [
        "Jaws was directed by Spielberg. <answer> Steven Spielberg </answer>",
        "<answer>Steven Spielberg</answer>",
        "<answer> George Lucas </answer>",
    ],
    "Who is the mother of Steven Spielberg?": [
        "<answer> Leah Posner </answer>",
        "<answer> Anne Spielberg </answer>",
        "<answer>Leah Posner</answer>",
    ],
}
SUB_QUERIES = {
    "Who is the mother of Steven Spielberg?": ["Steven Spielberg mother", "Query: Spielberg mother name", "   "]
}
ROLLOUTS = {  # by the last line of the branch's history (a search: by its query)
    "Sub-question: Who directed Jaws?": ["<search> Jaws director </search>", "<answer> Leah </answer>"],
    "Sub-question: When was Jaws released?": ["<answer> 1975 </answer>", "<answer> Leah Adler </answer>"],
    "Answer: Steven Spielberg": ["<answer> Leah Adler </answer>"] * 2,
    "Answer: George Lucas": ["<answer> Marcia Lucas </answer>"] * 2,
    "Sub-question: Who is the mother of Steven Spielberg?": [
        "<answer> Leah Adler </answer>",
        "<answer> Leah Posner </answer>",
    ],
    "Sub-question: Who is Spielberg's father?": ["<answer> Arnold Spielberg </answer>"] * 2,
    "Answer: Leah Posner": ["<answer> Leah Posner </answer>"] * 2,
    "Answer: Anne Spielberg": ["<answer> Anne Spielberg </answer>"] * 2,
    "search: Steven Spielberg mother": ["<answer> Leah Adler </answer>"] * 2,
    "search: Spielberg mother name": ["<answer> Leah Adler </answer>", "<answer> Leah </answer>"],
}
SECOND_TURN = "The documents settle it. <answer> Leah Adler </answer>"


def section(prompt: str, heading: str) -> str:
    rest = prompt.partition(f"### {heading}\n")[2]
    return rest.split("\n\n### ")[0] if "### " in rest else rest.strip()


def history_of(prompt: str) -> str:
    return prompt.partition("### Previous Iteration\n")[2].partition("\n\n### Your Output")[0]


def rollout_key(history: str) -> str:
    if history.endswith("</information>"):
        query = history.rpartition("<search> ")[2].partition(" </search>")[0]
        return f"search: {query}"
    return history.splitlines()[-1]


def jaws_reply(request: Request, sample: int) -> str:
    """The scripted policy: a function of the prompt it is asked and the sample index."""
    prompt = request.messages[0].content
    if len(request.messages) > 1:
        return SECOND_TURN
    if "Please judge based on the available information" in prompt:
        return TERMINATION[history_of(prompt).count("Sub-question:")][sample]
    if "break down the original question" in prompt:
        return SUB_QUESTIONS[history_of(prompt).count("Sub-question:")][sample]
    if prompt.startswith("We will provide you with a question, please answer"):
        return SELF_ANSWERS[section(prompt, "Question")][sample]
    if "Please generate a query for search engines" in prompt:
        return SUB_QUERIES[section(prompt, "Question")][sample]
    return ROLLOUTS[rollout_key(history_of(prompt))][sample]


def expand(config=CONFIG, reply=jaws_reply, question=QUESTION, run_id="run-1", run_seed=11):
    backend = ScriptedBackend(reply)
    batcher = Batcher(backend)
    retriever = FixedRetriever(RETRIEVAL)

    async def main():
        job = lambda: expand_question(question, batcher, retriever, config, run_id, run_seed)  # noqa: E731
        return (await batcher.run_all([job], max_in_flight=1))[0]

    tree = asyncio.run(main())
    return tree, backend, batcher, retriever
