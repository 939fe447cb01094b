"""The ``trackers`` option of every training method: where a run's logged numbers also go.

None by default (the registry's ``models.metrics`` keep a run's numbers). Asked for, each tracker
writes under the model's folder, ``<output_dir>/trackers/``, on this machine, reaching no server:

| tracker       | files                                  | open with                                         |
|---------------|----------------------------------------|---------------------------------------------------|
| `tensorboard` | event files in `trackers/tensorboard/` | `tensorboard --logdir <folder>`                   |
| `mlflow`      | a SQLite store `trackers/mlflow.db`    | `mlflow ui --backend-store-uri sqlite:///<file>`  |
| `wandb`       | an offline run in `trackers/wandb/`    | `wandb sync <run folder>` (uploads, when wanted)  |

The places are returned beside the run's metrics (``tracker_places``), so the ``models`` row and
the ``train`` command's table say where they are. Nothing here imports a tracker's package: the
option is checked, and a missing package named, before anything trains
(``tracker_callbacks.py`` builds the callbacks).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TRACKERS: tuple[str, ...] = ("tensorboard", "mlflow", "wandb")
OPTION = "trackers"

# the module each tracker imports, and what installs it
PACKAGES: Mapping[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "pip install 'ragfactory[trackers]' (or tensorboard)"),
    "mlflow": ("mlflow", "pip install 'ragfactory[trackers]' (or mlflow-skinny)"),
    "wandb": ("wandb", "pip install wandb"),
}


def requested_trackers(options: Mapping[str, Any]) -> list[str]:
    """The trackers ``options`` asks for: none by default; a name, comma-separated names or a
    list of names. Any other value is an error naming the option and the allowed names."""
    value = options.get(OPTION) or []
    names = [n.strip() for n in value.split(",") if n.strip()] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        names = [value]
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise ValueError(
            f"option {OPTION}: {unknown} not allowed; give any of {', '.join(TRACKERS)} "
            f"(e.g. {OPTION}=tensorboard,mlflow); none by default"
        )
    return list(dict.fromkeys(names))


def missing_packages(names: list[str]) -> str | None:
    """Why a requested tracker cannot report (its package is not installed), or None."""
    missing = [n for n in names if importlib.util.find_spec(PACKAGES[n][0]) is None]
    if not missing:
        return None
    return "; ".join(f"{OPTION}: {n} needs the {PACKAGES[n][0]} package: {PACKAGES[n][1]}" for n in missing)


def trackers_folder(output_dir: str | Path) -> Path:
    return Path(output_dir) / "trackers"


def tracker_places(names: list[str], output_dir: str | Path) -> dict[str, str]:
    """Where each tracker's files land, under the keys the run's metrics record them by."""
    folder = trackers_folder(output_dir).resolve()
    places = {
        "tensorboard": {"tensorboard_logdir": str(folder / "tensorboard")},
        "mlflow": {"mlflow_tracking_uri": f"sqlite:///{folder / 'mlflow.db'}"},
        "wandb": {"wandb_dir": str(folder / "wandb")},
    }
    return {key: place for name in names for key, place in places[name].items()}
