"""The training methods: one spec per method, each in its own module here, registered below
(TRL's shape: a method's config defaults beside the trainer it names; ``spec.py`` says what a
spec holds). The config's ``method`` literal, its default export table, the options check, the
export's columns, the TRL config and the trainer all read a method from here.

| method           | export table       | trainer                                                          |
|------------------|--------------------|------------------------------------------------------------------|
| `sft`            | `sft_examples`     | TRL SFT, assistant turns only                                    |
| `dpo`            | `preference_pairs` | TRL DPO                                                          |
| `grpo`           | `grpo_prompts`     | TRL GRPO with the run's reward functions                         |
| `grpo-agentic`   | `grpo_prompts`     | TRL GRPO, multi-turn, the build's retriever answers `<search>`  |
| `tree-advantage` | `trajectories`     | TreePS-RAG Eq. 3: per-token advantages A(n), observations masked |
| `prm`            | `step_labels`      | a step reward model: token classification on step separators    |

Adding a method is a module here with its ``SPEC`` and one line below.
"""

from __future__ import annotations

from typing import Any

from ragfactory.tasks.training.methods import dpo, grpo, grpo_agentic, prm, sft, tree_advantage
from ragfactory.tasks.training.methods.spec import COMMON_OPTIONS, REWARD_OPTIONS, MethodContext, MethodSpec

METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        sft.SPEC,
        dpo.SPEC,
        grpo.SPEC,
        grpo_agentic.SPEC,
        tree_advantage.SPEC,
        prm.SPEC,
    )
}
TRAIN_METHODS: tuple[str, ...] = tuple(METHODS)

__all__ = [
    "COMMON_OPTIONS",
    "METHODS",
    "REWARD_OPTIONS",
    "TRAIN_METHODS",
    "MethodContext",
    "MethodSpec",
    "check_options",
    "method_spec",
]


def method_spec(name: str) -> MethodSpec:
    """The spec of a training method; an unknown name is an error naming the known ones."""
    if name not in METHODS:
        raise ValueError(f"unknown training method {name!r}; expected one of {sorted(METHODS)}")
    return METHODS[name]


def check_options(method: str, options: dict[str, Any]) -> None:
    """Refuse an option the method does not read, naming the ones it does (its own, then every
    method's), and a bad ``trackers`` value."""
    from ragfactory.tasks.training.trackers import requested_trackers

    known = METHODS[method].options if method in METHODS else ()
    unknown = sorted(set(options) - set(known) - set(COMMON_OPTIONS))
    if unknown:
        raise ValueError(
            f"train --method {method}: unknown option(s) {unknown}; "
            f"{'known: ' + ', '.join(known) if known else 'it takes none of its own'}; "
            f"every method's: {', '.join(COMMON_OPTIONS)}"
        )
    requested_trackers(options)
