"""Engines from config: one backend per role, and the batcher strategies talk to.

docs/architecture.md, "Core contracts": ``LLMConfig`` names a backend and model per role
(``policy``, ``judge``; the judge defaults to the policy's engine and then shares its backend
object, so the model loads once and both roles' requests share engine calls). Moving a build
from this CPU to GPU workers is a config change: ``backend: vllm`` or ``backend: openai`` with a
``base_url``. The vLLM and OpenAI backends are imported only when named, so a CPU-only worker
never imports vllm or opens a connection it does not need.

Engines are found by name: ``backend`` is looked up in ``tasks/llm/registry.py``, where the three
built-in engines register at the end of this module and a new engine, or a test's scripted one,
registers its factory (that module's docstring says how, and what a worker process cannot see).

Retries: the OpenAI backend retries HTTP failures itself (honouring Retry-After); the others are
wrapped in ``RetryingBackend``. An error that survives the retries reaches the shard task.

One engine per process: ``make_backends`` keeps each engine it builds, keyed by its settings and
cache folder, behind one ``Scheduler`` (``tasks/llm/scheduler.py``), so the shards a worker
expands at once share one model in memory and their requests share its engine calls; the
scheduler runs a ``RetryingBackend``'s retries itself, around each engine call it makes.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ragfactory.tasks.llm.batcher import Batcher, BatcherConfig
from ragfactory.tasks.llm.cache import CallCache
from ragfactory.tasks.llm.config import LLMConfig, LLMRoleConfig
from ragfactory.tasks.llm.embedded import resolve_model
from ragfactory.tasks.llm.null_backend import make_null_backend
from ragfactory.tasks.llm.registry import backend_entry, register_backend
from ragfactory.tasks.llm.scheduler import Scheduler
from ragfactory.tasks.llm.types import Backend, Completion, Request, RetryPolicy, is_continuous

ROLES = ("policy", "judge")
# The engines this process built, by settings and cache folder: a process-wide pool, as a
# database driver keeps its connections, because a model loaded per shard would be loaded N times.
_ENGINES: dict[str, Scheduler] = {}
_ENGINES_LOCK = threading.Lock()


class RetryingBackend:
    """A backend whose failed engine calls are retried by a ``RetryPolicy``."""

    def __init__(self, backend: Backend, policy: RetryPolicy, sleep: Callable[[float], None] = time.sleep):
        self.backend = backend
        self.policy = policy
        self.sleep = sleep
        self.fingerprint = backend.fingerprint

    def __repr__(self) -> str:
        return f"RetryingBackend({self.backend!r}, attempts={self.policy.attempts})"

    @property
    def continuous(self) -> bool:
        """A continuous engine stays one behind its retries (``agenerate_batch``)."""
        return is_continuous(self.backend)

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        return self.policy.call(self.backend.generate_batch, requests, sleep=self.sleep)

    async def agenerate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        return await self.policy.acall(self.backend.agenerate_batch, requests)  # type: ignore[attr-defined]


def retry_policy(role: LLMRoleConfig) -> RetryPolicy:
    return RetryPolicy(attempts=role.retries + 1, backoff_s=role.retry_backoff_s)


def make_backend(role: LLMRoleConfig, cache_dir: str | Path | None) -> Backend:
    """The backend a role config names, built by the factory registered under its name
    (``tasks/llm/registry.py``); ``cache_dir`` holds the converted embedded model."""
    return backend_entry(role.backend).factory(role, Path(cache_dir) if cache_dir else None)


def transformers_backend(role: LLMRoleConfig, cache_dir: Path | None) -> Backend:
    """The embedded engine: transformers in this process, on CPU or one GPU."""
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    fields = {"device": role.device, "dtype": role.dtype, "max_batch_size": role.max_batch_size}
    settings = _build(TransformersSettings, fields, role.options, "transformers")
    backend = TransformersBackend(resolve_model(role.model, cache_dir), settings)
    return RetryingBackend(backend, retry_policy(role))


def vllm_backend(role: LLMRoleConfig, cache_dir: Path | None) -> Backend:
    """vLLM in this process: its async engine (continuous batching) unless the options say
    ``continuous: false``; its module is imported only here, so CPU workers never import vllm."""
    module = importlib.import_module("ragfactory.tasks.llm.vllm_backend")
    fields = {
        "model": resolve_model(role.model, cache_dir),
        "dtype": role.dtype,
        "max_num_seqs": role.max_batch_size,
    }
    config = _build(module.VLLMConfig, fields, role.options, "vllm")
    if config.continuous:
        engine = importlib.import_module("ragfactory.tasks.llm.vllm_async").VLLMAsyncBackend(config)
    else:
        engine = module.VLLMBackend(config)
    return RetryingBackend(engine, retry_policy(role))


def openai_backend(role: LLMRoleConfig, cache_dir: Path | None) -> Backend:
    """An OpenAI-compatible server over HTTP; it retries HTTP failures itself."""
    module = importlib.import_module("ragfactory.tasks.llm.openai_backend")
    fields = {
        "model": role.model,
        "base_url": role.base_url,
        "api_key_env": role.api_key_env,
        "max_concurrency": role.max_concurrency,
        "timeout_s": role.timeout_s,
        "max_retries": role.retries,
        "backoff_s": role.retry_backoff_s,
    }
    return module.OpenAIBackend(_build(module.OpenAIConfig, fields, role.options, "openai"))


def make_backends(llm: LLMConfig, cache_dir: str | Path | None) -> dict[str, Backend | Scheduler]:
    """role -> backend; roles with equal engine configs share one backend object.

    ``structured`` is not an engine setting (the batcher applies it per role), so a free judge
    and a constrained policy on the same model still share it.
    """
    return {name: shared_backend(llm.role(name), cache_dir) for name in ROLES}


def shared_backend(role: LLMRoleConfig, cache_dir: str | Path | None) -> Backend | Scheduler:
    """This process's engine for ``role``'s settings, built on first use.

    An engine registered with ``shared=False`` is built anew for each call, as it is.
    """
    entry = backend_entry(role.backend)
    if not entry.shared:
        return make_backend(role, cache_dir)
    engine = role.model_dump(mode="json", exclude={"structured"})
    key = json.dumps(
        {
            "engine": engine,
            "registration": entry.serial,
            "cache": str(Path(cache_dir).resolve()) if cache_dir else None,
        },
        sort_keys=True,
    )
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = scheduled(make_backend(role, cache_dir))
        return _ENGINES[key]


def scheduled(backend: Backend) -> Scheduler:
    """The scheduler in front of ``backend``, running a ``RetryingBackend``'s retries itself."""
    if isinstance(backend, RetryingBackend):
        return Scheduler(backend.backend, backend.policy, sleep=backend.sleep)
    return Scheduler(backend)


def make_batcher(
    llm: LLMConfig,
    cache: CallCache,
    cache_dir: str | Path | None = None,
    backends: Mapping[str, Backend] | None = None,
) -> Batcher:
    """The ``Generator`` a shard's strategies use: every role, one batcher, one call cache.

    Each role's engine is the one its ``backend`` names in the registry; ``backends`` replaces
    them all (a unit test of the batcher alone passes its doubles here; flow tests register
    theirs by name instead, see ``tasks/llm/registry.py``).
    """
    engines = dict(backends) if backends is not None else make_backends(llm, cache_dir)
    free = frozenset(name for name in ROLES if not llm.role(name).structured)
    limits = BatcherConfig(max_batch_size=llm.max_batch_size, max_batch_tokens=llm.max_batch_tokens)
    return Batcher(engines, cache, limits, free)


def _build(config_cls: type, fields: Mapping[str, Any], options: Mapping[str, Any], name: str):
    """``config_cls`` from the role fields it has (unset ones keep its defaults) and options.

    Options are passed as given, so a misspelt one is an error naming the backend.
    """
    accepted = _field_names(config_cls)
    kwargs = {k: v for k, v in fields.items() if k in accepted and v is not None}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ValueError(f"llm options {unknown} are not settings of the {name} backend; known: {sorted(accepted)}")
    return config_cls(**{**kwargs, **options})


def _field_names(config_cls: type) -> set[str]:
    if dataclasses.is_dataclass(config_cls):
        return {f.name for f in dataclasses.fields(config_cls)}
    return set(inspect.signature(config_cls).parameters)


# The built-in engines register like any plugged one would (``tasks/llm/registry.py``).
register_backend("transformers", transformers_backend, replace=True)
register_backend("vllm", vllm_backend, replace=True)
register_backend("openai", openai_backend, replace=True)
register_backend("null", make_null_backend, shared=False, replace=True)  # no batch to gather: see its module
