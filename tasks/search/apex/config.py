"""APEX-Searcher's settings, the ``search.apex`` section, with the paper's defaults where it
states them (APEX-Searcher, §2.2-2.4, Appendices C-D).
"""

from __future__ import annotations

from dataclasses import dataclass

from ragfactory.tasks.llm.types import Grammar
from ragfactory.tasks.rewards.answer import METRICS
from ragfactory.tasks.rewards.sepr import SeprConfig
from ragfactory.tasks.search.apex.execute import ExecSpec
from ragfactory.tasks.search.apex.plan_format import MAX_STEPS, plan_grammar

STRATEGY = "apex"
REWRITES = ("template", "llm")


@dataclass(frozen=True)
class ApexConfig:
    """APEX-Searcher parameters; defaults are the paper's where it states them."""

    n_plans: int = 8  # G: D.3 samples groups of 8 plans per question for GRPO
    max_steps: int = MAX_STEPS  # §2.2.2 bounds the steps; MuSiQue's longest gold plans have 4
    plan_temperature: float = 1.0  # GRPO samples its groups at T = 1 (verl's default rollout)
    plan_max_tokens: int = 256  # five numbered sub-questions fit with room to spare
    max_hops: int = 3  # H of Algorithm 2 is not printed; 3 lets a sub-question re-query twice
    top_k: int = 3  # C.1 shares Search-R1's retrieval setup: the top 3 passages
    exec_temperature: float = 0.0  # D.2: greedy decoding for the Execution Agent
    exec_max_tokens: int = 256  # brief reasoning plus one tag per call
    n_execute: int = 1  # §2.4 executes one plan; the best-SEPR plan gives the cleanest run
    execute_gold: bool = True  # §2.3 builds executor data from task plans: gold runs add clean ones
    rewrite: str = "template"  # C.1 rewrote symbolic gold steps with an LLM; "llm" does that
    gold_plan_field: str = "gold_plan"  # questions column (or metadata key) holding the gold plan
    metric: str = "em"  # C.1: EM is the primary metric; it makes an answer node's reward
    planner_role: str = "policy"
    executor_role: str = "policy"
    rewrite_role: str = "policy"
    sepr: SeprConfig = SeprConfig()  # what ``load_plan_scorer`` builds the scorer from

    def __post_init__(self):
        for name in ("n_plans", "max_steps", "plan_max_tokens", "max_hops", "top_k", "exec_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"ApexConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.n_execute < 0:
            raise ValueError(f"ApexConfig.n_execute must be >= 0, got {self.n_execute}")
        if self.rewrite not in REWRITES:
            raise ValueError(f"ApexConfig.rewrite must be one of {REWRITES}, got {self.rewrite!r}")
        if self.metric not in METRICS:
            raise ValueError(f"ApexConfig.metric must be one of {sorted(METRICS)}, got {self.metric!r}")
        if self.n_plans > 1 and self.plan_temperature <= 0:
            raise ValueError("ApexConfig.plan_temperature must be > 0 to sample several plans")
        _ = self.plan_grammar  # the output grammars must fit their max_tokens
        _ = self.exec_spec.grammars

    @property
    def plan_grammar(self) -> Grammar:
        return plan_grammar(self.plan_max_tokens, self.max_steps, "ApexConfig.plan_max_tokens")

    @property
    def exec_spec(self) -> ExecSpec:
        return ExecSpec(
            self.max_hops, self.top_k, self.exec_temperature, self.exec_max_tokens, self.executor_role, self.metric
        )
