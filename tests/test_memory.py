"""The allocator tuned for large tensors (``ragfactory/memory.py``): a step reuses the pages the
step before it freed, and a release gives every freed page back."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Frees a first 16 MB block (untuned, glibc then raises its dynamic mmap threshold past 8 MB),
# then 20 times allocates 40 blocks of 8 MB, writes them, puts a small long-lived object after
# each (it pins the heap's top, as Python objects allocated between two tensors do) and frees the
# 40 blocks: 20 "steps" of 335 MB. Prints the minor page faults of the 20 steps, the resident MB
# after them, and after ``release_free_memory``, each over the resident MB before the first step.
SCRIPT = """
import ctypes, resource, sys
from ragfactory.memory import release_free_memory, tune_allocator
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6
if sys.argv[1] == "tuned":
    assert tune_allocator()
elif sys.argv[1] == "training":
    assert tune_allocator(heap_reuse=False)
size = 8 << 20
libc.free(libc.malloc(2 * size))
before, faults, pins = rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt, []
for step in range(20):
    big = []
    for _ in range(40):
        block = libc.malloc(size)
        ctypes.memset(block, 1, size)
        big.append(block)
        pins.append(libc.malloc(256))
    for block in big:
        libc.free(block)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
kept = rss_mb() - before
release_free_memory()
print(faults, kept, rss_mb() - before)
"""
PAGES = 40 * (8 << 20) // 4096  # 81,920 pages a step writes


def steps(mode: str, env: dict | None = None) -> tuple[int, float, float]:
    """(minor faults over the 20 steps, resident MB after them, resident MB after the release)."""
    env = {"PATH": "/usr/bin:/bin", **(env or {})}  # no other MALLOC_* variable
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), float(out[1]), float(out[2])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_tuned_process_reuses_freed_blocks_and_releases_them():
    faults, kept, released = steps("tuned")
    # The first step faults its 81,920 pages in; the other 19 reuse them from the heap (about
    # 1.64 M faults if each block were mapped afresh, below). The release gives all 335 MB back.
    assert PAGES <= faults < 2 * PAGES
    assert kept > 300
    assert released < 20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
@pytest.mark.parametrize("mode,env", [("training", {}), ("tuned", {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)})])
def test_blocks_mapped_alone_fault_in_at_every_step(mode, env):
    # Training's tuning, and the environment's 1 MiB threshold winning over the engines' tuning,
    # map each block alone: every step faults all its pages in again, and nothing stays resident.
    faults, kept, released = steps(mode, env)
    assert faults >= 20 * PAGES
    assert kept < 20 and released < 20
