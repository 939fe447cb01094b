"""R3-RAG cold-start parameters.

The paper prints ``MAX_ITERATION`` (Algorithm 1: 5) and the λ_T values (Appendix E; the plain
text lost their minus signs: γ_fail = −0.1, γ_incorrect = −0.2, γ_correct = 0.6). It does not
print how many trajectories best-of-N samples, their temperatures, or the format reward's size;
the defaults below say where each comes from.
"""

from __future__ import annotations

from dataclasses import dataclass

STRATEGY = "r3"
OUTCOMES = ("correct", "incorrect", "fail", "format")


@dataclass(frozen=True)
class R3Config:
    """One question's attempts; every default's reason is beside it."""

    # Algorithm 1, line 1: MAX_ITERATION ← 5 steps per trajectory; no answer by then is a failure.
    max_iterations: int = 5
    # Best-of-N (Appendix A: "we vary the model's sampling temperature to produce multiple
    # samples for each problem"); the paper gives no N. 4 attempts: one greedy, three sampled.
    n_attempts: int = 4
    # Attempt i samples at temperatures[min(i, len - 1)]: the first greedy (Algorithm 1's own
    # trajectory), later ones warmer so they differ.
    temperatures: tuple[float, ...] = (0.0, 0.5, 0.7, 1.0)
    # Steps that must search before one may answer (0: the paper's free choice). A small model
    # answers from memory at once and its trajectory holds no retrieval to learn from or judge;
    # the demo's 135M model takes 1 (the ``r3_query`` grammar), as DecEx's min_iterations does.
    min_queries: int = 0
    # Hold step ``max_iterations`` to an answer (the ``r3_answer`` grammar) instead of letting a
    # last query fail the trajectory (Algorithm 1, False). A small model that keeps searching
    # would otherwise leave no trajectory to keep; DecEx's trees close the same way.
    answer_at_limit: bool = False
    top_k: int = 3  # passages per query (R3-RAG evaluates with the top-5, §4.3 and Figure 4)
    # Characters kept of each retrieved document in the next prompt (Appendix E limits documents
    # to 512 characters in RL; the cold start's prompts fit the small model's context this way).
    doc_chars: int = 512
    # λ_T of Eq. 4 by the trajectory's outcome (Appendix E); a trajectory with a format error
    # takes 1, so its penalty stays on the malformed step.
    gamma_correct: float = 0.6
    gamma_incorrect: float = -0.2
    gamma_fail: float = -0.1
    # r_format of a malformed step (a well-formed one gets 0); the paper gives no value: −1
    # outweighs the largest relevance a step can earn.
    format_penalty: float = -1.0
    # Eq. 2's match-based half: normalised exact match ("em") or the gold answer inside the
    # answer ("cover_em", for small models' long answers); the judge is asked only when it fails.
    metric: str = "em"
    judge_outcome: bool = True  # Eq. 2's model-based half on the ``judge`` role
    judge_relevance: bool = True  # Eq. 3 on the ``judge`` role; False leaves relevance 0
    max_tokens: int = 160  # a step: an analysis of a few sentences and one query or answer
    judge_max_tokens: int = 48  # a verdict line (the grammars bound it by bytes: 40 for the outcome)
    role: str = "policy"

    def __post_init__(self):
        for name in ("max_iterations", "n_attempts", "top_k", "doc_chars", "max_tokens", "judge_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"R3Config.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.min_queries < self.max_iterations:
            raise ValueError(f"R3Config.min_queries must be in [0, max_iterations - 1], got {self.min_queries}")
        if not self.temperatures or any(t < 0 for t in self.temperatures):
            raise ValueError(f"R3Config.temperatures must be non-empty and >= 0, got {self.temperatures}")
        if self.metric not in ("em", "cover_em"):
            raise ValueError(f"R3Config.metric must be em or cover_em, got {self.metric!r}")

    def temperature(self, attempt: int) -> float:
        return self.temperatures[min(attempt, len(self.temperatures) - 1)]

    def scale(self, outcome: str) -> float:
        """λ_T (Eq. 4) of a trajectory that ended ``outcome``."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown R3 outcome {outcome!r}; one of {OUTCOMES}")
        return {
            "correct": self.gamma_correct,
            "incorrect": self.gamma_incorrect,
            "fail": self.gamma_fail,
            "format": 1.0,
        }[outcome]
