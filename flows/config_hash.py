"""A build's config hash, by construction: what enters it is decided by one rule, not by a list
of sections kept by hand.

The hash names a build's outputs: the run id (``warehouse/runs.py``) and the cache keys of its
tasks derive from it, so a hash that moves rebuilds every warehouse, and a hash that stays while
the outputs change serves stale shards. The rule:

1. Settings that never change a row are left out: where the warehouse lies (its default stands in,
   so a moved warehouse keeps its run id), where shards run (``runner``), whether models may be
   downloaded (``allow_downloads``), and the scheduler's token budget (``llm.max_batch_tokens``:
   how calls are batched, never what they answer).
2. Every field that existed at hash version 1 enters with its value, default or not; those fields
   are listed in ``config_hash_v1.json`` beside this module, with their defaults then.
3. A field added since then enters only when its value differs from its default, and then whole
   (a section that is set enters with all of its fields). A build that does not use a new setting
   keeps its hash, so adding a setting never rebuilds a warehouse; the rule holds for sections
   added after version 1 too (``valuation``, and the sections of two strategies added since).
4. Changing the default of a version-1 field would change what an unchanged config builds while
   its hash stays; ``tests/test_config_hash.py`` fails then, and the fix is a new
   ``HASH_VERSION`` with a new field list (the version then enters the payload, so every id moves
   once, on purpose).

Rejected: ``model_dump(exclude_defaults=True)`` alone would be simpler and is the rule for new
fields, but applied to the version-1 fields it would change every run id made so far (their
payload carries every default); the field list keeps those ids and needs no upkeep, since it only
ever records the past.
"""

from __future__ import annotations

import hashlib
import json
import typing
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

HASH_VERSION = 1
V1_FIELDS = Path(__file__).with_name("config_hash_v1.json")
# rule 1: settings that never change a row
NOT_OUTPUT = frozenset({"allow_downloads", "runner", "warehouse", "llm.max_batch_tokens"})


@cache
def version_fields() -> dict[str, Any]:
    """The version-1 field paths (``section.field``; list items share their list's path), each with
    its default then (absent for fields inside an optional or listed model, which have none)."""
    return json.loads(V1_FIELDS.read_text(encoding="utf-8"))["fields"]


def hash_payload(config: BaseModel) -> dict[str, Any]:
    """The mapping that is hashed (rules 1-3), in JSON form."""
    payload = _walk(config, config.model_dump(mode="json"), "", version_fields())
    payload["warehouse"] = (
        type(config).model_fields["warehouse"].get_default(call_default_factory=True).model_dump(mode="json")
    )
    if HASH_VERSION != 1:
        payload["hash_version"] = HASH_VERSION
    return payload


def config_hash(config: BaseModel) -> str:
    payload = json.dumps(hash_payload(config), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _walk(model: BaseModel, dumped: dict[str, Any], prefix: str, known: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field in type(model).model_fields.items():
        path = f"{prefix}{name}"
        if path in NOT_OUTPUT:
            continue
        value = getattr(model, name)
        if path not in known:  # rule 3: a later field, whole when set
            if value != field.get_default(call_default_factory=True):
                out[name] = dumped[name]
            continue
        out[name] = _known(value, dumped[name], path + ".", known)
    return out


def _known(value: Any, dumped: Any, prefix: str, known: dict[str, Any]) -> Any:
    if isinstance(value, BaseModel):
        return _walk(value, dumped, prefix, known)
    if isinstance(value, (list, tuple)) and any(isinstance(item, BaseModel) for item in value):
        return [_known(item, d, prefix, known) for item, d in zip(value, dumped, strict=True)]
    return dumped


def field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every field path of ``model``'s class tree, models inside optionals and lists included."""
    paths = []
    for name, field in model.model_fields.items():
        paths.append(prefix + name)
        for inner in _models_in(field.annotation):
            paths += field_paths(inner, f"{prefix}{name}.")
    return paths


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def defaults_at(config: BaseModel, paths: list[str]) -> dict[str, Any]:
    """The JSON value at each of ``paths`` in ``config`` (a default config); a path under an unset
    optional or inside a list has no value of its own and reads ``None``."""
    dumped = config.model_dump(mode="json")
    out: dict[str, Any] = {}
    for path in paths:
        node: Any = dumped
        for part in path.split("."):
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
        out[path] = None if node is _MISSING else node
    return out


_MISSING = object()
