"""R3-RAG cold start as a registered strategy (``tasks/search/strategy.py``).

Its trees feed step-wise SFT (Algorithm 2, ``exports.py``; its SQL views are in ``views/``), which
trains the step loop ``evaluation.py`` adds as the ``r3`` evaluation mode; ``teacher.py`` registers
the seeded world's teacher engine for its cold start (docs/world.md); its
per-step rewards are the ``rewards`` rows it writes itself, so the valuation stage leaves its
trees alone.
"""

from __future__ import annotations

from pathlib import Path

from ragfactory.tasks.search.r3 import teacher  # noqa: F401  (registers the world teacher engine)
from ragfactory.tasks.search.r3.config import STRATEGY, R3Config
from ragfactory.tasks.search.r3.expansion import expand
from ragfactory.tasks.search.r3.fates import explain
from ragfactory.tasks.search.strategy import Strategy

R3 = Strategy(
    name=STRATEGY,
    config_type=R3Config,
    expand=expand,
    description="R3-RAG cold-start parameters (defaults and their sources in tasks/search/r3/config.py)",
    explain=explain,
    exports=f"{__package__}.exports",
    training=f"{__package__}.training",
    evaluation=f"{__package__}.evaluation",
    views=Path(__file__).parent / "views",
    prompts=Path(__file__).parent / "prompts",
)
