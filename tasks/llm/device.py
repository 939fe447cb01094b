"""Which device a worker computes on: ``$RAGFACTORY_DEVICE`` when set, else CUDA when present.

Work pools set the variable in their job variables (``cpu`` pool: cpu, ``gpu`` pool: cuda), so
the same flow code generates and trains on whatever the worker it lands on has. Asking for CUDA
on a machine without it is an error, not a silent fall back to a CPU run hours slower.
"""

from __future__ import annotations

import os

DEVICE_ENV = "RAGFACTORY_DEVICE"


def default_device() -> str:
    """``$RAGFACTORY_DEVICE`` (cpu, cuda, cuda:N), else cuda when available, else cpu."""
    import torch

    wanted = os.environ.get(DEVICE_ENV, "").strip().lower()
    if not wanted or wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted != "cpu" and not wanted.startswith("cuda"):
        raise ValueError(f"${DEVICE_ENV}={wanted!r}: expected cpu, cuda, cuda:N or auto")
    if wanted.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"${DEVICE_ENV}={wanted!r} but this machine has no usable CUDA device")
    return wanted
