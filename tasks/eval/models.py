"""Which model an evaluation loads, and the id its ``evals`` rows carry.

``--model`` names the embedded SmolLM2 (``embedded``), a model registered in the ``models``
table by the train flow (its id, or ``latest:<lineage>`` for the newest of a lineage: its
``path`` is loaded and the registry id names the rows), a local checkpoint folder (named by its
absolute path), or anything else the engine understands as a model (a hub id in the local cache,
a served model name), named as given. A registered model whose weights are gone is an error
rather than a silent fall-through to another meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragfactory.tasks.llm.embedded import is_embedded
from ragfactory.tasks.training.registry import resolve_model
from ragfactory.warehouse.store import Warehouse

EMBEDDED = "embedded"


@dataclass(frozen=True)
class EvalModel:
    """``model_id`` names the evals rows; ``ref`` is what the engine config loads."""

    model_id: str
    ref: str
    source: str  # embedded, registry, path or name


def resolve_eval_model(wh: Warehouse, spec: str) -> EvalModel:
    """The model a ``--model`` value names; an existing folder wins over a registry id."""
    spec = spec.strip()
    if not spec:
        raise ValueError("no model given: use 'embedded', a model id from the models table, or a path")
    if is_embedded(spec):
        return EvalModel(EMBEDDED, EMBEDDED, "embedded")
    ref, registered = resolve_model(wh, spec)
    if registered is not None:
        return EvalModel(registered, str(ref), "registry")
    path = Path(spec).expanduser()
    if path.exists():
        resolved = str(path.resolve())
        return EvalModel(resolved, resolved, "path")
    return EvalModel(spec, spec, "name")
