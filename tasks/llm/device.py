"""Which device a worker computes on: ``$RAGFACTORY_DEVICE`` when set, else CUDA when present.

Work pools set the variable in their job variables (``cpu`` pool: cpu, ``gpu`` pool: cuda), so
the same flow code generates and trains on whatever the worker it lands on has. Asking for CUDA
on a machine without it is an error, not a silent fall back to a CPU run hours slower, unless
the worker says so: ``ragfactory serve`` on a machine without a GPU starts the ``gpu`` pool's
worker with ``$RAGFACTORY_LOCAL_DEVICE=cpu``, which maps the pool's CUDA request to this
machine's CPU (and its vLLM engine to transformers, ``config.py``).
"""

from __future__ import annotations

import os

DEVICE_ENV = "RAGFACTORY_DEVICE"
# set on a worker, not a job: the device a CUDA request maps to on a machine without CUDA
LOCAL_DEVICE_ENV = "RAGFACTORY_LOCAL_DEVICE"


def default_device() -> str:
    """``$RAGFACTORY_DEVICE`` (cpu, cuda, cuda:N), else cuda when available, else cpu."""
    import torch

    wanted = os.environ.get(DEVICE_ENV, "").strip().lower()
    if not wanted or wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted != "cpu" and not wanted.startswith("cuda"):
        raise ValueError(f"${DEVICE_ENV}={wanted!r}: expected cpu, cuda, cuda:N or auto")
    if wanted.startswith("cuda") and not torch.cuda.is_available():
        if os.environ.get(LOCAL_DEVICE_ENV, "").strip().lower() == "cpu":
            return "cpu"
        raise RuntimeError(f"${DEVICE_ENV}={wanted!r} but this machine has no usable CUDA device")
    return wanted
