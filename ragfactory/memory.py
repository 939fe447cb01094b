"""The process's memory: the allocator tuned for large tensors, and the peak a command reached.

Model engines and trainers allocate and free tensors of megabytes at every decode or training
step. Two ways glibc's malloc can serve them, both bad for a night of engine calls:

- from its heap arenas, with its dynamic mmap threshold: a heap only gives memory back from its
  top, so the freed blocks stay resident as fragments, and a build's resident size climbed by
  gigabytes over engine calls that each need far less;
- each block mapped alone (a fixed 1 MiB threshold): a freed tensor leaves the process at once,
  but the next step's tensor is a fresh mapping that the kernel faults in and zeroes page by
  page. A hold-out-sized build spent 11 % of its CPU in the kernel that way (18.5 M minor faults).

``tune_allocator`` takes the middle: blocks up to ``MMAP_THRESHOLD_BYTES`` come from the heap, and
the heap is not trimmed at every free (``M_TRIM_THRESHOLD``), so a step reuses the pages the step
before it freed, already resident; two arenas, not one per thread, each with its own fragments.
``release_free_memory`` (glibc's ``malloc_trim(0)``) then gives every free page of every arena back
to the system; engines call it at the end of each call and after a running batch's larger
prefills (``tasks/llm/running_batch.py``), so the resident size between calls is what is live,
as with the mapped blocks, and the page faults are a call's, not a step's. Training keeps the
mapped blocks (``heap_reuse=False``): there the heap's fragments within a step cost more memory
than the faults cost time. Neither
changes a result, only where memory comes from; both do nothing where the C library is not glibc.
``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_ARENA_MAX`` in the environment
win: glibc read them at start and they are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import resource
import sys

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
# Larger than a forward pass's activations and logits at the batch sizes engines run (32 rows of
# a 49,152-token vocabulary in float32 are 6.3 MB); a block above it is mapped alone.
MMAP_THRESHOLD_BYTES = 256 << 20
TRIM_THRESHOLD_BYTES = 512 << 20  # a free top of the heap up to this stays until release_free_memory
ARENAS = 2
# Training's blocks: a step's activations, gradients and moments interleave, and the heap's
# fragments raised a DPO run's peak from 7.2 to 8.6 GB for 5 % of its wall time.
MAPPED_ALONE_BYTES = 1 << 20
GLIBC_TRIM_BYTES = 128 << 10


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 (musl and others have neither)
    except (OSError, AttributeError):
        return None
    return libc


def tune_allocator(heap_reuse: bool = True) -> bool:
    """Set glibc's mmap and trim thresholds and its arena count for this process; False where it
    cannot. ``heap_reuse=False`` maps every block of 1 MiB or more alone (training: see below)."""
    libc = _libc()
    if libc is None:
        return False
    mmap, trim = (MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES) if heap_reuse else (MAPPED_ALONE_BYTES, GLIBC_TRIM_BYTES)
    done = True
    for variable, parameter, value in (
        ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, mmap),
        ("MALLOC_TRIM_THRESHOLD_", M_TRIM_THRESHOLD, trim),
        ("MALLOC_ARENA_MAX", M_ARENA_MAX, ARENAS),
    ):
        if variable not in os.environ:
            done &= bool(libc.mallopt(parameter, value))
    return done


def release_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim(0)``): the end of an
    engine call, or its prefill, where what comes next is not yet allocated."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def peak_rss_mb() -> tuple[float, float]:
    """The peak resident memory of this process and of its largest finished child, in MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return own * 1024 / 1e6, child * 1024 / 1e6
