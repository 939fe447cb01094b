"""Engines by name: the registry a role's ``backend`` setting is looked up in.

``LLMRoleConfig.backend`` names an engine; ``make_backend`` (``tasks/llm/engine.py``) asks this
registry for the factory registered under that name and calls it with the role's config and the
model cache folder. The built-in engines (``transformers``, ``vllm``, ``openai``) register
themselves when ``engine.py`` is imported; nothing else is special about them.

Plugging in a new engine::

    from ragfactory.tasks.llm.registry import register_backend

    def make_tgi(role: LLMRoleConfig, cache_dir: Path | None) -> Backend:
        return RetryingBackend(TgiBackend(role.base_url, role.model), retry_policy(role))

    register_backend("tgi:http", make_tgi)

and name it in the config (``llm: {policy: {backend: "tgi:http", model: ...}}``). A plugged
name is ``<plugin>:<name>``, so the config can tell it from a misspelt built-in before anything
is imported. The factory gets the whole role config (model, device, dtype, options, retries ...)
and returns a ``Backend``; it wraps its own retries (``RetryingBackend``, which the engine's
scheduler runs) if the engine does not retry by itself. ``shared=True`` (the default) puts the
engine in the process's pool behind one ``Scheduler`` (one model in memory; concurrent shards'
requests share engine calls); ``shared=False`` gives each batcher the factory's backend as it
is, behind a scheduler of its own, which suits a test double whose calls a test counts.

Tests register scripted backends here (``tests/fakes.py``) instead of patching modules.

Blind spot: the registry lives in the process that registers. A registration made in one
process (a test, a notebook) is not seen by a Prefect worker or any other subprocess that runs
the flow: a plugged engine a deployment uses must be registered by a module the worker imports
(for instance the package's own ``__init__``), and a name not registered there fails the shard
with the "unknown LLM backend" error below, naming what is registered.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ragfactory.tasks.llm.config import engine_name
from ragfactory.tasks.llm.types import Backend

if TYPE_CHECKING:
    from ragfactory.tasks.llm.config import LLMRoleConfig

BackendFactory = Callable[["LLMRoleConfig", "Path | None"], Backend]


@dataclass(frozen=True)
class BackendEntry:
    """A registered engine: its name, the factory that builds it, whether the process shares it."""

    name: str
    factory: BackendFactory
    shared: bool = True
    serial: int = 0  # which registration: the engine pool never serves an earlier one's engine


_BACKENDS: dict[str, BackendEntry] = {}
_LOCK = threading.Lock()
_SERIALS = itertools.count(1)


def register_backend(name: str, factory: BackendFactory, *, shared: bool = True, replace: bool = False) -> None:
    """Make ``name`` a backend a role config can name; ``factory(role, cache_dir)`` builds it.

    ``name`` is a built-in name or ``<plugin>:<name>``. Registering a taken name is an error
    naming it, unless ``replace``.
    """
    engine_name(name)  # the shape a config accepts; an error naming ``name`` otherwise
    with _LOCK:
        if name in _BACKENDS and not replace:
            raise ValueError(f"LLM backend {name!r} is already registered")
        _BACKENDS[name] = BackendEntry(name, factory, shared, next(_SERIALS))


def unregister_backend(name: str) -> None:
    """Forget ``name``; an error naming it if it was not registered.

    Engines the pool built from it are not served again: a later registration has a new serial.
    """
    with _LOCK:
        if _BACKENDS.pop(name, None) is None:
            raise ValueError(f"LLM backend {name!r} is not registered")


def backend_entry(name: str) -> BackendEntry:
    """The entry registered under ``name``; an error naming it and what is registered."""
    with _LOCK:
        entry = _BACKENDS.get(name)
        known = sorted(_BACKENDS)
    if entry is None:
        raise ValueError(f"unknown LLM backend {name!r}; registered in this process: {', '.join(known)}")
    return entry


def registered_backends() -> list[str]:
    """The names registered in this process, sorted."""
    with _LOCK:
        return sorted(_BACKENDS)
