"""The scripted Jaws question behind the hand-worked APEX-Searcher runs of tests/search/apex/test_apex.py.

Question "Who is the mother of the director of Jaws?" (golden "Leah Adler") with the MuSiQue-style
gold plan "Jaws >> director", "#1 >> mother". The scripted model answers each executor prompt by
its kind and the sub-question it names; the planner's three samples are fixed. The embedder is a
table: the gold rewrite "Who is the director of Jaws?" and its paraphrase "Who directed Jaws?"
are at cosine 0.8; "Who is the mother of #" (both sides' normalised step 2) is one vector;
"When was Jaws released?" is orthogonal to everything.
"""

from __future__ import annotations

import asyncio

from ragfactory.tasks.llm.batcher import Batcher
from ragfactory.tasks.llm.types import Request
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.rewards.embedding_cache import EmbeddingCache
from ragfactory.tasks.rewards.sepr import PlanScorer
from ragfactory.tasks.search.apex.expansion import ApexConfig, run_apex_question
from tests.fakes import FixedRetriever, ScriptedBackend, TableEmbedder

QUESTION = {
    "question_id": "jaws",
    "question": "Who is the mother of the director of Jaws?",
    "golden_answers": ["Leah Adler"],
    "gold_plan": [
        {"step": 1, "question": "Jaws >> director", "answer": "Steven Spielberg", "paragraph_support_idx": 0},
        {"step": 2, "question": "#1 >> mother", "answer": "Leah Adler", "paragraph_support_idx": 1},
    ],
}
CONFIG = ApexConfig(n_plans=3, max_hops=3, top_k=2, n_execute=1, execute_gold=True)
PLANS = [
    "Let me plan.\n<plan>\n1. When was Jaws released?\n2. Who is the mother of #1?\n",
    "<plan>\n1. Who directed Jaws?\n2. Who is the mother of #1?\n",
    "I think the answer is Leah Adler.",
]
EMBEDDINGS = {
    "Who is the director of Jaws?": [1.0, 0.0, 0.0, 0.0],
    "Who directed Jaws?": [0.8, 0.0, 0.0, 0.6],
    "Who is the mother of #?": [0.0, 1.0, 0.0, 0.0],
    "When was Jaws released?": [0.0, 0.0, 1.0, 0.0],
}

JAWS = Hit("p-jaws", "Jaws (film)", "Jaws is a 1975 film directed by Steven Spielberg.", 2.0)
BIO = Hit("p-bio", "Steven Spielberg", "Steven Spielberg is an American film director.", 1.5)
LEAH = Hit("p-leah", "Leah Adler", "Leah Adler was the mother of Steven Spielberg.", 3.0)
ARNOLD = Hit("p-arnold", "Arnold Spielberg", "Arnold Spielberg was the father of Steven Spielberg.", 1.0)
RETRIEVAL = {
    "Jaws director": [JAWS, BIO],
    "Steven Spielberg mother": [LEAH, JAWS],
    "Spielberg parents": [LEAH, ARNOLD],
}

MOTHER = "Who is the mother of Steven Spielberg?"
SUFFICIENCY = {  # by sub-question
    "Who directed Jaws?": "Hmm, hard to say.",  # unreadable: a format error, the default retrieves
    "Who is the director of Jaws?": "<reasoning>Well known.</reasoning> <decision>answer",
    MOTHER: "<reasoning>The knowledge lacks his mother.</reasoning> <decision>retrieve</decision>",
    "When was Jaws released?": "<decision>answer</decision>",  # p0, run only when two plans run
    "Who is the mother of 1975?": "<decision>answer</decision>",
}
QUERIES = {
    "Who directed Jaws?": "<query>Jaws director",
    MOTHER: "Need his mother. <query>Steven Spielberg mother",
}
NEXT_QUERY = "Try his parents. <query>Spielberg parents"
CONTINUE = {  # by (sub-question, hops made)
    ("Who directed Jaws?", "1"): "<reasoning>Doc 1 names him.</reasoning> <decision>stop",
    (MOTHER, "1"): "<reasoning>Check his parents too.</reasoning> <decision>continue",
    (MOTHER, "2"): "<reasoning>Doc 1 names her.</reasoning> <decision>stop",
}
ANSWERS = {  # sub-answers by sub-question
    "Who directed Jaws?": "Doc 1 says so. <answer>Steven Spielberg",
    "Who is the director of Jaws?": "<answer> Steven Spielberg </answer>",
    MOTHER: "Doc 1 names her. <answer>Leah Adler",
    "When was Jaws released?": "<answer>1975</answer>",
    "Who is the mother of 1975?": "<answer>unknown</answer>",
}
SYNTHESIS = "The mother of Steven Spielberg is Leah Adler. <answer>Leah Adler"


def section(prompt: str, heading: str) -> str:
    return prompt.partition(f"### {heading}\n")[2].partition("\n\n###")[0]


def apex_reply(request: Request, sample: int) -> str:
    """The scripted model: a function of the prompt it is asked and the sample index."""
    prompt = request.messages[0].content
    sub_question = section(prompt, "Sub-question")
    if prompt.startswith("You are a planning agent"):
        return PLANS[sample]
    if "Decide whether this knowledge is already sufficient" in prompt:
        return SUFFICIENCY[sub_question]
    if "retrieval hops have been made" in prompt:
        hops = prompt.partition("to answer a sub-question. ")[2].split()[0]
        return CONTINUE[(sub_question, hops)]
    if "Write a different query" in prompt:
        return NEXT_QUERY
    if "write one targeted search query" in prompt:
        return QUERIES[sub_question]
    if prompt.startswith("Answer the original question"):
        return SYNTHESIS
    return ANSWERS[sub_question]


def scorer(embeddings=EMBEDDINGS, folder=None) -> PlanScorer:
    return PlanScorer(EmbeddingCache(TableEmbedder(embeddings), folder))


def run(config=CONFIG, question=QUESTION, reply=apex_reply, run_id="run-1", run_seed=7, plan_scorer=None):
    backend = ScriptedBackend(reply)
    batcher = Batcher(backend)
    retriever = FixedRetriever(RETRIEVAL)
    plan_scorer = plan_scorer or scorer()

    async def job():
        return await run_apex_question(question, batcher, retriever, plan_scorer, config, run_id, run_seed)

    async def main():
        return (await batcher.run_all([job], max_in_flight=1))[0]

    return asyncio.run(main()), backend, retriever
