"""Each shipped output grammar and the parser its outputs go to (text -> error, None when well
formed), and the template parameters a grammar needs: the grammar tests and the null engine's
tests check outputs against them."""

from __future__ import annotations

from ragfactory.tasks.eval.baselines import free_answer
from ragfactory.tasks.search import parsing
from ragfactory.tasks.search.apex.execute import parse_decision
from ragfactory.tasks.search.apex.plan_format import parse_plan
from ragfactory.tasks.search.decex import steps as decex_steps
from ragfactory.tasks.search.mcts.steps import parse_turn
from ragfactory.tasks.search.parsing import find_tag
from ragfactory.tasks.search.r3.judges import parse_outcome, parse_relevance
from ragfactory.tasks.search.r3.steps import parse_step as parse_r3_step
from ragfactory.tasks.search.treeps.steps import parse_step


def _required(tag: str):
    return lambda text: None if find_tag(text, tag) else f"no <{tag}>"


# grammar -> the parser its outputs go to: text -> error (None when well formed)
PARSERS = {
    "decex_termination": lambda t: decex_steps.parse_termination(t).error,
    "decex_sub_question": lambda t: decex_steps.parse_sub_question(t).error,
    "decex_self_answer": lambda t: decex_steps.parse_self_answer(t).error,
    "decex_sub_query": lambda t: decex_steps.parse_sub_query(t).error,
    "decex_rollout": lambda t: parsing.parse_rollout_turn(t).error,
    "treeps_step": lambda t: parse_step(t, "treeps_step").error,
    "treeps_search_r1": lambda t: parse_step(t, "treeps_search_r1").error,
    "apex_plan": lambda t: parse_plan(t, 5).error,
    "apex_sufficiency": lambda t: parse_decision(t, "sufficiency").error,
    "apex_continue": lambda t: parse_decision(t, "continue").error,
    "apex_query_first": lambda t: decex_steps.parse_sub_query(t).error,
    "apex_query_next": lambda t: decex_steps.parse_sub_query(t).error,
    "apex_knowledge_answer": lambda t: decex_steps.parse_self_answer(t).error,
    "apex_sub_answer": lambda t: decex_steps.parse_self_answer(t).error,
    "apex_synthesis": lambda t: decex_steps.parse_self_answer(t).error,
    "apex_rewrite": _required("question"),
    "reasonrag_reasoning": lambda t: parse_turn(t).error,
    "reasonrag_grounding": lambda t: parse_turn(t).error,
    "reasonrag_final": lambda t: parse_turn(t).error,
    "reasonrag_query": lambda t: parse_turn(t).error,
    "flashrag_direct": lambda t: None if free_answer(t) else "empty",
    "r3_step": lambda t: parse_r3_step(t).error,
    "r3_query": lambda t: parse_r3_step(t).error,
    "r3_answer": lambda t: parse_r3_step(t).error,
    "r3_relevance_judge": lambda t: None if parse_relevance(t) is not None else "unread",
    "r3_outcome_judge": lambda t: None if parse_outcome(t) is not None else "unread",
    "flashrag_rag": lambda t: None if free_answer(t) else "empty",
}
PARAMS = {"apex_plan": {"max_steps": 5}, "decex_termination": {"outcome": "decision"}}
