"""ReasonRAG MCTS parameters.

The paper prints none of the search's numbers (iterations, exploration constant, rollouts per
node, α, child limit); the defaults below say where each comes from. "Authors' code" is the
public ReasonRAG repository's data generation (``data_generation.py`` and its pipeline): read
for its choices, not copied. Which pairs are exported is the export config's (``dpo.min_gap``,
``tasks/search/mcts/exports.py``), as for DecEx.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragfactory.tasks.search.mcts.uct import UctSettings

STRATEGY = "mcts"
VALUE_SOURCES = ("spre", "judge")


@dataclass(frozen=True)
class MctsConfig:
    """One question's search; every default's reason is beside it."""

    # Search budget: expansions per question. The authors' code runs 64 (max_rollouts) with
    # GPT-4o; 16 keeps a CPU build of the embedded model to minutes per question and still
    # fills a child_limit-2 tree four levels deep.
    iterations: int = 16
    # Eq. 5's c. The authors' code uses 1.414 (√2, the classic UCT constant).
    c: float = 1.414
    # Eq. 5 as printed (√ΣN / (1 + N)); True takes the classic √(ln ΣN / (1 + N)), the authors'
    # code's form.
    log_visits: bool = False
    # Children per state: the authors' code passes max_children=2, one preference pair per state.
    child_limit: int = 2
    # Steps per trajectory; the last one must answer. The authors' code passes max_iter=7 (three
    # query/evidence rounds and an answer).
    max_depth: int = 7
    # Queries a trajectory makes before it may answer (0: the paper's free choice). A small model
    # answers from memory at once, and a tree of two answers holds no retrieval to learn from; the
    # demo's 135M model takes 1, as DecEx's min_iterations does.
    min_queries: int = 0
    # SPRE's α (Eq. 1): the authors' code decays F1 by beta=0.95 per step.
    alpha: float = 0.95
    # v of Eq. 1: "e.g., F1 match to the ground truth" (§2.2.1); "em" or "cover_em" too.
    metric: str = "f1"
    # Rollouts k per new node for SPRE (Eq. 1); each is a greedy continuation to an answer.
    # Appendix A notes that simulation is the cost; 1 greedy rollout is the cheapest unbiased
    # estimate of a deterministic policy's outcome.
    rollouts: int = 1
    # "spre" (Eq. 1 with rollouts) or "judge" (Appendix A, Eq. 6: the Fig. 14 judge on the
    # ``judge`` role scores the partial trajectory instead of simulating it).
    value: str = "spre"
    # Selections per round of one question, with virtual loss (uct.py); 1 is sequential MCTS.
    parallel_selections: int = 1
    top_k: int = 3  # passages per query: ReasonRAG, Appendix E.1, "consistently retrieving the top 3 documents"
    temperature: float = 1.0  # expansion samples: siblings must differ to be compared
    max_tokens: int = 256  # a Reasoning or Grounding turn is a few sentences ending in one tag
    role: str = "policy"

    def __post_init__(self):
        for name in (
            "iterations",
            "child_limit",
            "max_depth",
            "rollouts",
            "parallel_selections",
            "top_k",
            "max_tokens",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"MctsConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.min_queries < 0 or 2 * self.min_queries + 1 > self.max_depth:
            raise ValueError(
                f"MctsConfig.min_queries must be in [0, (max_depth - 1) / 2] "
                f"(a query and its evidence each take a step), got {self.min_queries}"
            )
        if not 0 < self.alpha <= 1:
            raise ValueError(f"MctsConfig.alpha must be in (0, 1], got {self.alpha}")
        if self.c < 0:
            raise ValueError(f"MctsConfig.c must be >= 0, got {self.c}")
        if self.metric not in ("em", "f1", "cover_em"):
            raise ValueError(f"MctsConfig.metric must be em, f1 or cover_em, got {self.metric!r}")
        if self.value not in VALUE_SOURCES:
            raise ValueError(f"MctsConfig.value must be one of {VALUE_SOURCES}, got {self.value!r}")

    def uct(self) -> UctSettings:
        return UctSettings(c=self.c, child_limit=self.child_limit, max_depth=self.max_depth, log_visits=self.log_visits)
