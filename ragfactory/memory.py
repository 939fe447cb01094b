"""The process's memory: the allocator tuned for large tensors, and the peak a command reached.

Model engines allocate and free tensors of megabytes at every decode step (a KV cache grows by
one token a step). glibc's malloc serves such blocks from its heap arenas once its dynamic mmap
threshold has risen past them, and a heap only gives memory back from its top: the freed blocks
stay resident as fragments, and a build's resident size climbs by gigabytes over engine calls
that each need far less. ``tune_allocator`` fixes the threshold (blocks of 1 MiB and more are
mapped and unmapped on their own, so a freed tensor leaves the process at once) and keeps two
arenas (one per thread otherwise, each with its own fragments). It changes no result, only where
memory comes from, and does nothing where the C library is not glibc. ``MALLOC_MMAP_THRESHOLD_``
or ``MALLOC_ARENA_MAX`` in the environment win: glibc read them at start and they are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import resource
import sys
from contextlib import contextmanager

M_ARENA_MAX = -8  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20  # KV blocks of a layer are MBs; Python's small objects stay in arenas
ARENAS = 2


TRAINING_MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own ceiling for its dynamic threshold


def _libc():
    """glibc, or None where the C library is another (musl and others: no mallopt to call)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def tune_allocator(mmap_threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold and arena count for this process; False where it cannot."""
    libc = _libc()
    if libc is None:
        return False
    done = True
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        done &= bool(libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold))
    if "MALLOC_ARENA_MAX" not in os.environ:
        done &= bool(libc.mallopt(M_ARENA_MAX, ARENAS))
    return done


@contextmanager
def training_allocator():
    """The allocator for a training run, the engines' back after it.

    A training step allocates the same activations, gradients and logits tiles at every step.
    Mapped one by one as an engine's KV blocks are (1 MiB and up), each was faulted in page by
    page and zeroed again at every step: 20-25 % of an SFT or DPO step on CPU
    (``benchmarks/train_vs_trl.py``). During training, blocks under 32 MiB come from the heap,
    where the next step reuses them; its resident size is bounded by a step's working set, not by
    the number of steps, as an engine's would be by its calls. After it, the free heap pages go
    back to the system (``malloc_trim``) and the engines' threshold returns.
    """
    tune_allocator(TRAINING_MMAP_THRESHOLD_BYTES)
    try:
        yield
    finally:
        tune_allocator()
        gc.collect()  # a trainer's reference cycles hold its tensors until collected
        libc = _libc()
        if libc is not None:
            libc.malloc_trim(0)


def peak_rss_mb() -> tuple[float, float]:
    """The peak resident memory of this process and of its largest finished child, in MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return own * 1024 / 1e6, child * 1024 / 1e6
