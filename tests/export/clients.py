"""Runs ``trainer_clients.py`` in ``.venv-clients`` (verl, LLaMA-Factory, OpenRLHF, FlashRAG; override
with $RAGFACTORY_CLIENTS_PYTHON) and reads the JSON result it prints (``test_trainer_clients.py``,
``tests/rewards/test_flashrag_agreement.py``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENTS_PYTHON = Path(os.environ.get("RAGFACTORY_CLIENTS_PYTHON", REPO / ".venv-clients" / "bin" / "python"))
SCRIPT = Path(__file__).with_name("trainer_clients.py")


def run_client(name: str, args: dict) -> dict:
    """``name``'s result for ``args``, from the client venv; fails the test when that venv is missing."""
    if not CLIENTS_PYTHON.exists():
        pytest.fail(f"{CLIENTS_PYTHON} is missing: run `make venv-clients`")
    done = subprocess.run(
        [str(CLIENTS_PYTHON), str(SCRIPT), name, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=args.get("output"),
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT "))
