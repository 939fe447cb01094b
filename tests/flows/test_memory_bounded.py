"""Memory does not grow with the number of questions: the five strategies on the null engine
(``backend: null``), built on 200 questions, peak at most 1.3 times their build on 50.

Each build is a ``ragfactory build`` process of its own (a temporary Prefect server of its own,
a fresh warehouse); its peak is the resident set of the build process as the kernel counts it
(``ru_maxrss`` of a child, read by a wrapper process that ran only that build). The trees are
small (the demo's sizes) so that both builds take a couple of minutes on two cores; what the
test bounds is what a build keeps per question it has done, which tree size does not change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.flows.configs import null_config

# Runs the command in argv[1:] and prints the largest resident set (KiB) of a process it waited for.
WRAPPER = (
    "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
    "print('maxrss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)"
)


def peak_kib(tmp_path: Path, questions: int) -> int:
    path = tmp_path / f"memory-{questions}.yaml"
    path.write_text(yaml.safe_dump(null_config(tmp_path / f"wh-{questions}", -(-questions // 2), limit=None)))
    command = [str(Path(sys.executable).with_name("ragfactory")), "build", "--config", str(path)]
    # a process of its own, as from a shell: no Prefect setting of this worker's earlier tests leaks in
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / f"prefect-home-{questions}")
    done = subprocess.run([sys.executable, "-c", WRAPPER, *command], capture_output=True, text=True, env=env)
    last = done.stdout.strip().splitlines()[-1].split()
    assert last[0] == "maxrss_kib" and last[2] == "0", done.stdout[-3000:] + done.stderr[-3000:]
    return int(last[1])


@pytest.mark.slow  # ~5 min on 2 shared cores: two builds, each with its Prefect server and imports
def test_peak_memory_of_200_questions_is_within_1_3_times_that_of_50(tmp_path):
    small, large = peak_kib(tmp_path, 50), peak_kib(tmp_path, 200)
    print(json.dumps({"peak_mib_50": small // 1024, "peak_mib_200": large // 1024, "ratio": large / small}))
    assert large / small <= 1.3, (small, large)
