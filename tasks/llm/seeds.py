"""Sampling seeds derived from where a call sits in a build, not from when it runs.

A node's seed is a stable hash of (run seed, question id, node path), so the node samples the same
text whatever else shares its engine batch and in whatever order questions are scheduled; that is
what makes completions content-addressable (docs/architecture.md, "Core contracts": the
call cache). Sample ``i`` of a request uses ``seed + i`` (``types.Sampling``), so seeds keep two bits
of headroom below the int64 limit of the ``llm_calls.seed`` column.
"""

from __future__ import annotations

import hashlib
import json

SEED_BITS = 62  # int64 column, minus headroom for seed + sample index


def derive_seed(run_seed: int, question_id: str, path: str) -> int:
    """A stable non-negative seed for one node of one question in one run.

    >>> derive_seed(0, "q1", "0/1") == derive_seed(0, "q1", "0/1")
    True
    >>> derive_seed(0, "q1", "0/1") != derive_seed(0, "q1", "0/2")
    True
    """
    payload = json.dumps([int(run_seed), str(question_id), str(path)], ensure_ascii=False)
    digest = hashlib.sha256(payload.encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - SEED_BITS)
