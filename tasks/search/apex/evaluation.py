"""APEX-Searcher's inference as an evaluation mode: plan, then execute the plan (§2.4).

The model answers the planner prompt (``apex_plan``, greedy, held to the plan grammar), and its
plan runs through the Execution Agent of ``execute.py`` (Algorithm 2 per sub-question, then the
synthesis), the same calls a build's executions make; a malformed plan falls back to the
question as a one-step plan, as the paper's does (§2.4.1). The model plans and executes, so the
mode measures what the two exports train together: the planner (GRPO on SEPR) and the executor
(SFT on correct runs). Each question's first llm call is its plan, so a plan's SEPR against a
gold plan can be scored from the ``evals`` row's ``llm_call_ids`` (``benchmarks/learning.py``).

``max_rounds`` bounds the retrieval hops a sub-question takes (H of Algorithm 2; the build's
default is 3), ``max_tokens`` every executor call; a plan has the build's 256 tokens (its grammar
spells out five steps, and a greedy plan stops at ``</plan>``). ``MODES`` adds the mode to the
evaluation as ``apex`` (``tasks/eval/runner.py``); this module belongs to the evaluation part.
"""

from __future__ import annotations

from ragfactory.tasks.eval.inference import EvalQuestion, InferenceConfig, Outcome
from ragfactory.tasks.llm.seeds import derive_seed
from ragfactory.tasks.llm.types import Generator
from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.search.apex.config import STRATEGY, ApexConfig
from ragfactory.tasks.search.apex.execute import CALLS, Execution, execute_plan
from ragfactory.tasks.search.apex.expansion import plan_request
from ragfactory.tasks.search.apex.plan_format import parse_plan
from ragfactory.tasks.search.common import sample_n
from ragfactory.tasks.search.tree import Node, QuestionTree

MODE = STRATEGY
BUILD = ApexConfig()  # the build's plan bound and hops, which the mode's settings narrow


def apex_config(config: InferenceConfig) -> ApexConfig:
    """The planner's and the executor's settings under an evaluation's: greedy (or its
    temperature), its documents, its tokens for each executor call, and at most ``max_rounds``
    hops a sub-question."""
    return ApexConfig(
        n_plans=1,
        max_hops=min(config.max_rounds, BUILD.max_hops),
        top_k=config.top_k,
        exec_temperature=config.temperature,
        exec_max_tokens=config.max_tokens,
    )


async def answer_apex(
    question: EvalQuestion, generator: Generator, retriever: Retriever | None, config: InferenceConfig
) -> Outcome:
    """One question planned and executed; the outcome's calls start with the plan's."""
    if retriever is None:
        raise ValueError("apex inference needs a retriever")
    apex = apex_config(config)
    tree = QuestionTree(f"eval-{MODE}", question.question_id, STRATEGY)
    root = tree.add_root(question.question)
    path = f"{MODE}/plan"
    seed = derive_seed(config.seed, question.question_id, path)
    request = plan_request(question.question, question.question_id, path, apex, 1, config.temperature, seed)
    [completion] = await sample_n(generator, request)
    plan = parse_plan(completion.text, apex.max_steps)
    node = tree.add_child(root, "p0", "plan", completion.text, llm_call_id=completion.call_id or None)
    steps = plan.questions if plan.error is None else [question.question]
    run = Execution(tree, list(question.golden_answers), generator, retriever, apex.exec_spec, config.seed)
    answer = await execute_plan(run, node, steps, question.question)
    return _outcome(sorted(tree.nodes, key=lambda n: n.depth), answer.parsed.get("answer"), plan.error)


def _outcome(chain: list[Node], prediction: str | None, plan_error: str | None) -> Outcome:
    """Calls, searches and format errors of one question's chain (root first), in call order."""
    outcome = Outcome(prediction=prediction or "", errors=[f"plan: {plan_error}"] if plan_error else [])
    for node in chain:
        call = "plan" if node.kind == "plan" else node.parsed.get("call")
        if call is None:  # the question and its sub-questions: no model wrote them
            continue
        outcome.n_steps += 1
        if node.llm_call_id:
            outcome.call_ids.append(node.llm_call_id)
        if call in ("query_first", "query_next") and node.parsed.get("query"):
            outcome.n_retrievals += 1
        if node.is_format_error:
            outcome.errors.append(f"{call}: {node.format_error}")
    return outcome


MODES = {MODE: answer_apex}
GRAMMARS = {MODE: tuple(prompt for _, _, prompt in CALLS.values())}  # the plan's is checked per question
