"""DecEx-RAG expansion parameters (§3.2 and Table 2) and the output grammars of its prompts.

``DecExConfig`` holds the paper's defaults, each with its reason; ``grammar`` fits a prompt's
output grammar to ``max_tokens`` (too small a budget is an error naming the field).
"""

from __future__ import annotations

from dataclasses import dataclass

from ragfactory.tasks.llm.types import Grammar
from ragfactory.tasks.prompts.loader import load_grammar
from ragfactory.tasks.rewards.answer import METRICS
from ragfactory.tasks.search.decex.rollout import RolloutSpec

STRATEGY = "decex"
STRATEGY_NO_PRUNING = "decex_no_pruning"
TERMINATION = "decex_termination"
BRANCH_PROMPTS = ("decex_sub_question", "decex_self_answer", "decex_sub_query")


@dataclass(frozen=True)
class DecExConfig:
    """DecEx-RAG expansion parameters; defaults are the paper's where it states them."""

    k: int = 3  # execution branches per decision (Table 2: k = 3)
    n_rollouts: int = 4  # rollouts per branch (Table 2: n = 4)
    t_max: int = 4  # iteration limit (§3.2 and Table 2: T_max = 4)
    top_k: int = 3  # documents per retrieval (§3.2: "set to 3 for all methods")
    # §2.2 samples the termination decision "multiple times"; Table 2 counts 4k generations
    # per layer (termination, sub-question, self-answer, sub-query), i.e. k termination samples.
    termination_samples: int = 3
    # States before this many iterations skip the termination vote and go on. The paper has none
    # (0): a strong policy that must "rely only on the existing information" continues from the
    # bare question by itself, while a weak one answers from memory at once and its tree has no
    # retrieval to learn from; 1 makes every tree take at least one step.
    min_iterations: int = 0
    # §2.2 skips retrieval when the best self-answer's reward "exceeds a preset threshold" but
    # never gives it; 0.75 of n = 4 rollouts asks for three fully correct rollouts (or all four
    # nearly so), the self-knowledge analogue of the >50% termination vote with one spare.
    threshold: float = 0.75
    metric: str = "f1"  # v(rollout) of Eq. 1 ("e.g., F1 score"); "em" or "cover_em" also work
    no_pruning: bool = False  # the "No Pruning Search" of Table 2, for comparison
    temperature: float = 0.7  # §2.2 asks only for "non-zero"; diverse yet still on format
    max_tokens: int = 512  # one step's reasoning and tag fit well within it
    rollout_max_turns: int = 4  # a rollout may search as often as the tree iterates (T_max)
    role: str = "policy"  # Qwen3-30B-A3B in §3.2: termination, sub-questions, rollouts
    retrieval_role: str = "policy"  # §3.2 ran the retrieval decision on the model being trained

    def __post_init__(self):
        for name in ("k", "n_rollouts", "t_max", "top_k", "termination_samples", "max_tokens", "rollout_max_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"DecExConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.metric not in METRICS:
            raise ValueError(f"DecExConfig.metric must be one of {sorted(METRICS)}, got {self.metric!r}")
        if self.min_iterations < 0:
            raise ValueError(f"DecExConfig.min_iterations must be >= 0, got {self.min_iterations}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"DecExConfig.threshold must be in [0, 1], got {self.threshold}")
        if self.temperature <= 0:
            raise ValueError("DecExConfig.temperature must be > 0: the decisions are sampled")
        for prompt in (TERMINATION, "decex_rollout", *BRANCH_PROMPTS):
            grammar(prompt, self.max_tokens)  # every output grammar must fit max_tokens

    @property
    def strategy(self) -> str:
        return STRATEGY_NO_PRUNING if self.no_pruning else STRATEGY

    @property
    def rollout_spec(self) -> RolloutSpec:
        return RolloutSpec(
            self.n_rollouts,
            self.rollout_max_turns,
            self.top_k,
            self.temperature,
            self.max_tokens,
            self.role,
            grammar("decex_rollout", self.max_tokens),
        )


def grammar(prompt: str, max_tokens: int, **params: str) -> Grammar:
    """A DecEx prompt's output grammar; too small a ``max_tokens`` is an error naming the field."""
    params = params or _DEFAULT_PARAMS.get(prompt, {})
    return load_grammar(prompt, max_tokens, "DecExConfig.max_tokens", **params)


_DEFAULT_PARAMS = {TERMINATION: {"outcome": "decision"}}
