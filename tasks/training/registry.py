"""The model registry: a cache key per training, and the ``models`` row each finished run writes.

The key hashes what shapes the weights: the export's content snapshot, the method, the training
fields of the config and the base model. The model id is derived from it, so a second identical
request finds its row and trains nothing.

A row also records what the model saw: ``question_ids``, the questions of the export rows it
trained on plus everything its base model saw (a registered base's own ids, transitively). The
``model_questions`` view reads them, and derives them from the lineage's run and export table for
rows written before they were recorded; evaluations mark the questions a model saw
(``evals.is_seen``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow.parquet as pq

from ragfactory.tasks.llm.embedded import is_embedded
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.sql_files import sql_file
from ragfactory.warehouse.store import Warehouse

SEEN_SQL = sql_file("ragfactory.tasks.training", "seen_questions")


def cache_key(export_snapshot: str, method: str, config: dict, base_model: str) -> str:
    """A stable hash of one training's inputs (dict order does not matter)."""
    payload = json.dumps(
        {"export": export_snapshot, "method": method, "config": config, "base": base_model},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def model_id_for(method: str, key: str) -> str:
    return f"{method}-{key}"


def find_model(wh: Warehouse, model_id: str) -> dict | None:
    """The registered row of a model whose weights are still on disk, else None."""
    rows = wh.read("models", model_id=model_id).to_pylist()
    for row in rows:
        if row["path"] and Path(row["path"]).exists():
            return row
    return None


def model_row(
    model_id: str,
    lineage: dict,
    base_model: str,
    method: str,
    export_snapshot: str,
    config: dict,
    metrics: dict,
    path: str,
    question_ids: Iterable[str] | None = None,
) -> dict:
    """One ``models`` row; the training run is named after the model it produced."""
    return {
        "model_id": model_id,
        "run_id": model_id,
        "lineage": json.dumps(lineage, sort_keys=True),
        "base_model": base_model,
        "method": method,
        "export_snapshot": export_snapshot,
        "config": json.dumps(config, sort_keys=True),
        "metrics": json.dumps(metrics, sort_keys=True),
        "path": path,
        "created_at": dt.datetime.now(dt.UTC),
        "question_ids": None if question_ids is None else sorted(set(question_ids)),
    }


def seen_question_ids(wh: Warehouse, model: str) -> set[str]:
    """The questions a model (registered id, or the path of a registered model) trained on, its
    base models' included; empty for a model the registry does not know (e.g. ``embedded``)."""
    return set(query(wh, SEEN_SQL, {"model": model}).column("question_id").to_pylist())


def export_question_ids(files: Iterable[str | Path]) -> set[str]:
    """The ``question_id`` values of export files (none for files without that column)."""
    ids: set[str] = set()
    for path in files:
        if "question_id" in pq.read_schema(path).names:
            ids.update(q for q in pq.read_table(path, columns=["question_id"]).column(0).to_pylist() if q)
    return ids


def register_model(wh: Warehouse, row: dict) -> Path:
    return wh.write("models", [row], row["model_id"])


LATEST = "latest:"
EMBEDDED = "embedded"
PROMOTED = "promoted"


def promoted_model(wh: Warehouse, pipeline: str | None = None) -> str | None:
    """The model the newest ``promotions`` row left promoted (of ``pipeline``, else of any):
    the night's candidate when it won, else its incumbent; None before any night decided."""
    rows = wh.read("promotions", **({"pipeline": pipeline} if pipeline else {})).to_pylist()
    if not rows:
        return None
    return max(rows, key=lambda r: (r["created_at"], r["night"]))["promoted"]


def latest_model(wh: Warehouse, name: str) -> dict | None:
    """The newest registered model of lineage ``name`` whose weights are still on disk."""
    rows = [
        row
        for row in wh.read("models").to_pylist()
        if json.loads(row["lineage"] or "{}").get("name", row["method"]) == name
    ]
    for row in sorted(rows, key=lambda r: r["created_at"], reverse=True):
        if row["path"] and Path(row["path"]).exists():
            return row
    return None


@dataclass(frozen=True)
class ModelRef:
    """A model spec resolved once, at the flow's edge.

    ``load`` is what an engine or ``from_pretrained`` is given ('embedded' stays as it is: the
    engine converts and caches the embedded checkpoint itself); ``model_id`` names the rows the
    run writes (a registry id, 'embedded', a folder's absolute path, or the name as given);
    ``source`` says which of the four it was.
    """

    spec: str
    load: str
    model_id: str
    source: str  # embedded | registry | path | name

    @property
    def registered_id(self) -> str | None:
        """The registry id when the spec named a registered model, else None."""
        return self.model_id if self.source == "registry" else None

    @property
    def configured(self) -> str:
        """What a config names for this model: a registered model's weights folder (so a config
        hash changes when a new model lands), else the spec as written."""
        return self.load if self.source == "registry" else self.spec


def resolve_model_ref(wh: Warehouse, spec: str) -> ModelRef:
    """The model a spec names: 'embedded', ``latest:<lineage>`` (the newest model of that lineage
    whose weights are on disk), ``promoted`` (the model the nightly pipeline promoted last,
    ``promotions``), a registered model id, an existing folder (which wins over a
    registry id of the same name), or anything else an engine understands (a hub id, a served
    model name). A registered id whose weights are gone is an error, not a hub id to try.
    """
    spec = spec.strip()
    if not spec:
        raise ValueError("no model given: use 'embedded', a model id from the models table, or a path")
    if is_embedded(spec):
        return ModelRef(spec, EMBEDDED, EMBEDDED, "embedded")
    if spec == PROMOTED:
        return _promoted_ref(wh, spec)
    if spec.startswith(LATEST):
        return _latest_ref(wh, spec)
    path = Path(spec).expanduser()
    if path.exists():
        return ModelRef(spec, str(path.resolve()), str(path.resolve()), "path")
    row = find_model(wh, spec)
    if row is not None:
        return ModelRef(spec, row["path"], row["model_id"], "registry")
    if wh.read("models", model_id=spec).num_rows:
        raise FileNotFoundError(f"model {spec!r} is registered but its weights are not on disk")
    return ModelRef(spec, spec, spec, "name")


def _promoted_ref(wh: Warehouse, spec: str) -> ModelRef:
    """The model the nightly pipeline promoted last, under the spec ``promoted``."""
    named = promoted_model(wh)
    if named is None:
        raise LookupError(
            f"{spec!r}: no model promoted in {wh.root} yet (the nightly pipeline's promotions table is empty)"
        )
    return replace(resolve_model_ref(wh, named), spec=spec)


def _latest_ref(wh: Warehouse, spec: str) -> ModelRef:
    """The newest registered model of the lineage ``latest:<name>`` names."""
    name = spec[len(LATEST) :]
    row = latest_model(wh, name)
    if row is None:
        raise LookupError(
            f"{spec!r}: no trained model of lineage {name!r} in {wh.root} "
            "(models.lineage name, default the training method)"
        )
    return ModelRef(spec, row["path"], row["model_id"], "registry")
    row = find_model(wh, spec)
    if row is not None:
        return row["path"], row["model_id"]
    if wh.read("models", model_id=spec).num_rows:
        raise FileNotFoundError(f"model {spec!r} is registered but its weights are not on disk")
    return spec, None
