"""Build configurations more than one flow test runs: the null engine at the demo's tree sizes
(the null build and the memory bound) and the scripted frontier build (frontier selection and the
nightly pipeline)."""

from __future__ import annotations

from ragfactory.flows.config import BuildConfig
from tests.fakes import SCRIPTED, scripted_llm

STRATEGIES = ["decex", "treeps", "mcts", "r3", "apex"]
DEMO_SIZES = {  # configs/demo.yaml's tree sizes
    "decex": {"k": 2, "n_rollouts": 2, "t_max": 1, "min_iterations": 1, "termination_samples": 3},
    "treeps": {"n": 4, "depth": 2, "temperature": 0.7},
    "mcts": {"iterations": 6, "max_depth": 4, "min_queries": 1, "temperature": 0.7},
    "r3": {"n_attempts": 3, "max_iterations": 2, "min_queries": 1, "answer_at_limit": True},
    "apex": {"n_plans": 2, "max_steps": 2, "max_hops": 1, "execute_gold": False},
}


def null_config(root, questions: int = 1, limit: int | None = 20) -> dict:
    """The demo's tree sizes on the null engine, ``questions`` from each of HotpotQA and MuSiQue
    (the first ``limit`` rows of each file, all in train)."""
    return {
        "name": f"null-{questions}",
        "warehouse": {"root": str(root)},
        "datasets": [{"name": "hotpotqa", "limit": limit}, {"name": "musique", "limit": limit}],
        "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
        "retrieval": {"dense": {"enabled": False}},
        "llm": {"policy": {"backend": "null", "model": "embedded"}},
        "search": {"strategies": STRATEGIES, "questions_per_dataset": questions, **DEMO_SIZES},
    }


def frontier_config(root, model: str = "scripted-model", backend: str = SCRIPTED) -> BuildConfig:
    llm = scripted_llm(backend, max_in_flight=2)
    llm["policy"]["model"] = model
    return BuildConfig.model_validate(
        {
            "name": "frontier",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "hotpotqa", "limit": 40}],
            "retrieval": {"dense": {"enabled": False}},
            "llm": llm,
            "search": {
                "strategies": ["decex"],
                "select": "frontier",
                "questions_per_night": 2,
                "shard_size": 2,
                "decex": {"k": 2, "n_rollouts": 1, "t_max": 1, "termination_samples": 1},
            },
        }
    )
