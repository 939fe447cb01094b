"""Which device a worker computes on: ``$RAGFACTORY_DEVICE`` when set, else CUDA when present.

Work pools set the variable in their job variables (``cpu`` pool: cpu, ``gpu`` pool: cuda), so
the same flow code generates and trains on whatever the worker it lands on has. Asking for CUDA
on a machine without it is an error, not a silent fall back to a CPU run hours slower, unless
the worker says so: ``ragfactory serve`` on a machine without a GPU starts the ``gpu`` pool's
worker with ``$RAGFACTORY_LOCAL_DEVICE=cpu``, which maps the pool's CUDA request to this
machine's CPU (and its vLLM engine to transformers, ``config.py``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

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


def engine_threads(count: int | None = None, available: int | None = None) -> int:
    """The intra-op threads an engine computes on: ``count``, else half the threads torch was given
    (``available``: one per core, or this process's share where ``OMP_NUM_THREADS`` and the like
    set one), at least one: the other half is left to the build's own Python, its Prefect server
    and any neighbour, which a decode step's small matrix products would otherwise wait for."""
    if count:
        return count
    if available is None:
        import torch

        available = torch.get_num_threads()
    return max(1, available // 2)


@contextlib.contextmanager
def cpu_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to ``count`` for the block (in the calling thread, which runs
    the block's parallel regions), as they were afterwards."""
    import torch

    before = torch.get_num_threads()
    if count != before:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if count != before:
            torch.set_num_threads(before)


def resolve_dtype(dtype: str, device: str) -> str:
    """The engine's dtype: ``auto`` is bfloat16 on CUDA and float32 on CPU (see the setting)."""
    if dtype == "auto":
        return "bfloat16" if device.startswith("cuda") else "float32"
    if dtype not in {"float32", "float16", "bfloat16"}:
        raise ValueError(f"dtype must be auto, float32, float16 or bfloat16, got {dtype!r}")
    return dtype
