"""TreePS-RAG's tree settings, the ``search.treeps`` section, with the paper's defaults (TreePS-RAG,
Table 5, Table 3, Appendix C.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ragfactory.tasks.llm.types import Grammar
from ragfactory.tasks.prompts.loader import load_grammar
from ragfactory.tasks.rewards.answer import METRICS
from ragfactory.tasks.search.treeps.pruning import LINKAGES, PRUNING_MODES
from ragfactory.tasks.search.treeps.steps import check_prompt

STRATEGY = "treeps"


@dataclass(frozen=True)
class TreePSConfig:
    """TreePS-RAG tree parameters; defaults are the paper's (Table 5, Table 3, Appendix C.3)."""

    n: int = 8  # rollout budget N: the rollout group size of Table 5
    depth: int = 4  # depth limit D: "Maximum step 4" of Table 5
    n_retain: int = 2  # local retention N_retain: the default tree of Table 3
    top_k: int = 3  # passages per search: "The Top-3 passages are returned" (C.3)
    pruning: str = "similarity"  # §2.2; "random" is the "w/o similarity-based pruning" ablation
    linkage: str = "average"  # §2.2 names none; average linkage needs only pairwise distances
    # B_d per depth instead of Eq. 2, e.g. (9, 7, 5, 1) with n_retain = 3 for Table 3's "Larger
    # Tree", or (N, 1, 1, 1) with n_retain = N for N independent trajectories; () follows Eq. 2.
    branching: tuple[int, ...] = ()
    metric: str = "em"  # the leaf reward: EM as in Search-R1 (§2.3); "f1" or "cover_em" too
    temperature: float = 1.0  # Table 5
    max_tokens: int = 512  # "Maximum length (per turn)" of Table 5
    prompt: str = "treeps_step"  # Appendix A: Search-R1's template with <reason> for <think>
    role: str = "policy"

    def __post_init__(self):
        for name in ("n", "depth", "n_retain", "top_k", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"TreePSConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.pruning not in PRUNING_MODES:
            raise ValueError(f"TreePSConfig.pruning must be one of {PRUNING_MODES}, got {self.pruning!r}")
        if self.linkage not in LINKAGES:
            raise ValueError(f"TreePSConfig.linkage must be one of {LINKAGES}, got {self.linkage!r}")
        if self.branching and (len(self.branching) != self.depth or min(self.branching) < 1):
            raise ValueError(
                f"TreePSConfig.branching needs {self.depth} factors >= 1 (one per depth), got {self.branching}"
            )
        if self.metric not in METRICS:
            raise ValueError(f"TreePSConfig.metric must be one of {sorted(METRICS)}, got {self.metric!r}")
        if self.temperature <= 0:
            raise ValueError("TreePSConfig.temperature must be > 0: children are sampled")
        check_prompt(self.prompt)
        _ = self.grammar  # the step grammar must fit max_tokens

    @property
    def grammar(self) -> Grammar:
        """The output grammar of one step under ``prompt``, fitted to ``max_tokens``."""
        return load_grammar(self.prompt, self.max_tokens, "TreePSConfig.max_tokens")

    def branching_at(self, depth: int, n_parents: int) -> int:
        """B_d for ``n_parents`` retained parents at depth d − 1 (Eq. 2)."""
        if self.branching:
            return self.branching[depth - 1]
        return math.ceil(self.n / n_parents)
