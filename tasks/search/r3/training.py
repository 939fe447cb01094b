"""What R3-RAG's data trains with: ``r3_process``, its process reward (Eq. 3-4) of an agentic
GRPO rollout (``REWARDS``; this module belongs to the training part: ``plugin.py`` names it).

A rollout's steps are its searches and its last turn. As the R3 cold start scores them
(``expansion.py``), step i earns

    process_i = relevance_i + format_i

with relevance_i the judge's score in {0, 0.1, …, 1} of the passages search i retrieved for the
original question (Eq. 3, the ``r3_relevance_judge`` prompt on the ``judge`` role; a step
without passages, and a verdict that does not read, scores 0), and format_i = ``format_penalty``
(−1) on a last turn with neither a search nor an answer, else 0. The rollout's reward is

    r3_process = λ_T · Σ_i process_i

with λ_T by the outcome T (Eq. 4, Appendix E): 0.6 when the answer matches a gold answer
(``metric``: EM, or cover-EM for small models' long answers), −0.2 when it does not, −0.1 when
the rollout ran out of turns or tokens still searching ("fail"), and 1 for a format error, so its
−1 stays negative. The judge model here is an engine (the build's ``llm`` config, the judge
role, or the policy's model when the build named no judge: ``RewardContext.judge_generator``);
tests plug a scripted one in the engine registry.

Worked example (``tests/training/test_agentic.py``): two searches judged 0.7 and 0.3, then the
right answer: 0.6 · (0.7 + 0.3 + 0) = 0.6.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.rewards import RewardContext, RewardFunc
from ragfactory.tasks.rewards.answer import cover_exact_match, exact_match
from ragfactory.tasks.rewards.functions import completion_text, parse_answer
from ragfactory.tasks.search.common import hits_from_records
from ragfactory.tasks.search.parsing import parse_rollout_turn
from ragfactory.tasks.search.r3.config import R3Config
from ragfactory.tasks.search.r3.judges import judge_request, parse_relevance, relevance_values

# (question, hits) pairs -> one relevance score each (None: no readable verdict)
RelevanceJudge = Callable[[Sequence[tuple[str, Sequence[Hit]]]], list[float | None]]
METRICS = {"em": exact_match, "cover_em": cover_exact_match}
INFORMATION_END = "</information>"


def last_turn(text: str) -> str:
    """The text after the last observation: the turn that ended the rollout."""
    return text.rsplit(INFORMATION_END, 1)[-1]


def outcome(text: str, golden: Sequence[str], metric: str) -> str:
    """correct / incorrect / fail / format of one rollout (module docstring).

    No answer is a failure when the rollout was still searching as it ended (its text ends in an
    observation, or its last turn is a search cut off by the budget), else a format error."""
    answer = parse_answer(text)
    if answer is not None:
        return "correct" if golden and METRICS[metric](answer, list(golden)) else "incorrect"
    tail = last_turn(text).strip()
    if (INFORMATION_END in text and not tail) or parse_rollout_turn(tail).get("action") == "search":
        return "fail"
    return "format"


@dataclass
class R3ProcessReward:
    """A TRL reward function; ``retrieved`` is the rollout's column (``tasks/training/agentic.py``)."""

    judge: RelevanceJudge
    questions: Mapping[str, str]  # question_id -> question text
    config: R3Config = R3Config()
    metric: str = "em"
    __name__ = "r3_process"

    def __call__(
        self, prompts, completions, retrieved=None, golden_answers=None, question_id=None, **columns
    ) -> list[float]:
        if retrieved is None or question_id is None:
            raise ValueError("r3_process scores agentic rollouts: it needs the retrieved and question_id columns")
        items = [
            (self.question(qid), hits_from_records(hits))
            for qid, searches in zip(question_id, retrieved)
            for hits in searches
            if hits
        ]
        scores = iter(self.judge(items) if items else [])
        rewards = []
        for completion, searches, golden in zip(completions, retrieved, golden_answers or [[]] * len(completions)):
            relevance = [(next(scores) or 0.0) if hits else 0.0 for hits in searches]
            text = completion_text(completion)
            ended = outcome(text, golden or [], self.metric)
            fmt = self.config.format_penalty if ended == "format" else 0.0
            rewards.append(self.config.scale(ended) * (sum(relevance) + fmt))
        return rewards

    def question(self, question_id: str) -> str:
        if question_id not in self.questions:
            raise ValueError(f"r3_process: question {question_id!r} is not in the warehouse's questions")
        return self.questions[question_id]


class EngineJudge:
    """Relevance verdicts from an engine's ``judge`` role, batched through the project's batcher."""

    def __init__(self, generator, config: R3Config = R3Config()):
        self.generator, self.config = generator, config

    def __call__(self, items: Sequence[tuple[str, Sequence[Hit]]]) -> list[float | None]:
        async def one(i: int, question: str, hits: Sequence[Hit]) -> float | None:
            values = relevance_values(question, hits, self.config.doc_chars)
            request = judge_request(
                "r3_relevance_judge", values, self.config.judge_max_tokens, i, (("reward", "r3_process"),)
            )
            [completion] = await self.generator.generate(request)
            return parse_relevance(completion.text)

        async def run():
            return await self.generator.run_all([one(i, q, h) for i, (q, h) in enumerate(items)], len(items))

        return asyncio.run(run())


def process_reward(ctx: RewardContext) -> RewardFunc:
    """``r3_process`` for a run: the build's judge and the questions of the rows it trains on."""
    if ctx.warehouse is None:
        raise ValueError("r3_process needs the warehouse: the questions and the build's judge")
    metric = ctx.options.get("metric", "em")
    if metric not in METRICS:
        raise ValueError(f"r3_process: unknown metric {metric!r}; one of {sorted(METRICS)}")
    return R3ProcessReward(EngineJudge(ctx.judge_generator()), ctx.question_texts(), metric=metric)


REWARDS = {"r3_process": process_reward}
