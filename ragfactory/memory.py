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
import os
import resource
import sys

M_ARENA_MAX = -8  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20  # KV blocks of a layer are MBs; Python's small objects stay in arenas
ARENAS = 2


def tune_allocator() -> bool:
    """Fix glibc's mmap threshold and arena count for this process; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt to call
        return False
    done = True
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        done &= bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if "MALLOC_ARENA_MAX" not in os.environ:
        done &= bool(mallopt(M_ARENA_MAX, ARENAS))
    return done


def peak_rss_mb() -> tuple[float, float]:
    """The peak resident memory of this process and of its largest finished child, in MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return own * 1024 / 1e6, child * 1024 / 1e6
