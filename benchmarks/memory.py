"""Peak resident memory of a build, per stage: the demo, and null-engine builds of 100 and 1,000
questions whose ratio says whether memory grows with the work.

Method: each build is a ``ragfactory build`` subprocess into a fresh warehouse. This process
samples the resident set size (RSS) of the build process, and of it together with every process
it started (the temporary Prefect server, the watchdog: ``tree_peak_mb``), with psutil every
0.1 s, and reads its log, run at Prefect's DEBUG level so that every task logs "Executing task
'<task>' ..." when it starts and "Finished in state ..." when it ends. A sample of the build
process counts towards the peak of every task running when it was taken (``expand_trees``,
``value_nodes``, ``write_training_data`` ...; ``flow`` when none is: start-up, catalog); the
build's peak (``peak_mb``) is its largest sample, the figure the kernel's ``ru_maxrss`` gives.
RSS counts shared libraries and mapped files once per process; what matters here is the ratio
between sizes, measured in one run, and which stage holds the peak. The machine's other work
does not enter a process's RSS, but a sample interval shorter than a stage is assumed.

Builds:
- ``demo``: ``configs/demo.yaml`` as shipped (the embedded SmolLM2-135M model; minutes) with
  ``--demo``;
- ``null-100`` and ``null-1000``: the five strategies at their config defaults (the papers'
  parameters; the demo's tree sizes with ``--demo-sizes``) on the null engine over about 100
  and 1,000 bundled train questions (``search.questions_per_dataset``: an equal share from each
  of the three train datasets; there are 982 train questions in all), BM25 only.
  Goal: RSS(1000) / RSS(100) <= 1.2.

Run: .venv/bin/python benchmarks/memory.py [--sizes 100 1000] [--demo] [--demo-sizes]
Writes benchmarks/results/memory.json.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEMO_SIZES, null_build_config, report  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXECUTING = re.compile(r"Executing task '(?P<task>[^']+)' for task run '(?P<run>[^']+)'")
FINISHED = re.compile(r"Task run '(?P<run>[^']+)' - Finished in state")
MB = 1 << 20


def tree_rss(process: psutil.Process) -> int:
    """Bytes resident in ``process`` and its descendants (those alive when asked)."""
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.Error:  # ended between the listing and the reading
            pass
    return total


class StagePeaks:
    """Peak RSS per running task (stage), fed by the build's log and an RSS sampling thread."""

    def __init__(self):
        self.running: dict[str, str] = {}  # task run -> task
        self.peaks: dict[str, int] = {}  # the build process's peak while each stage ran
        self.tree_peak = 0  # the build process and its children (Prefect's server, the watchdog)
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            if match := EXECUTING.search(text):
                self.running[match["run"]] = match["task"]
            elif match := FINISHED.search(text):
                self.running.pop(match["run"], None)

    def sample(self, rss: int, tree: int) -> None:
        with self.lock:
            for stage in set(self.running.values()) or {"flow"}:
                self.peaks[stage] = max(self.peaks.get(stage, 0), rss)
            self.tree_peak = max(self.tree_peak, tree)


def measure(config: Path, root: Path, interval_s: float = 0.1) -> dict:
    """Run one build; (wall seconds, peak RSS of its process and of its process tree, the
    process's peak per stage)."""
    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "DEBUG", "PYTHONUNBUFFERED": "1"}
    command = [str(Path(sys.executable).with_name("ragfactory")), "build", "--config", str(config), "--root", str(root)]
    stages, start = StagePeaks(), time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    process, done = psutil.Process(child.pid), threading.Event()

    def sampler():
        while not done.is_set():
            try:
                own = process.memory_info().rss
            except psutil.Error:  # ended: the reader below sees it too
                break
            stages.sample(own, tree_rss(process))
            done.wait(interval_s)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    tail: list[str] = []
    for text in child.stdout:  # type: ignore[union-attr]
        stages.line(text)
        tail = (tail + [text])[-20:]
    child.wait()
    done.set()
    thread.join()
    if child.returncode != 0:
        raise SystemExit(f"{config}: exit {child.returncode}\n{''.join(tail)}")
    return {
        "wall_s": round(time.perf_counter() - start, 1),
        "peak_mb": round(max(stages.peaks.values()) / MB),
        "tree_peak_mb": round(stages.tree_peak / MB),
        **{f"{stage}_mb": round(peak / MB) for stage, peak in sorted(stages.peaks.items())},
    }


def null_build(tmp: Path, questions: int, **search) -> tuple[Path, Path]:
    """A config file for a null-engine build of about ``questions`` questions, and its root."""
    root = tmp / f"wh-null-{questions}"
    path = tmp / f"null-{questions}.yaml"
    path.write_text(yaml.safe_dump(null_build_config(root, questions, **search)))
    return path, root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--demo", action="store_true", help="also build configs/demo.yaml (minutes)")
    parser.add_argument(
        "--demo-sizes",
        action="store_true",
        help="the null builds at the demo's tree sizes instead of the papers' (shorter)",
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            config, root = null_build(Path(tmp), size, **(DEMO_SIZES if args.demo_sizes else {}))
            rows.append({"build": f"null-{size}", **measure(config, root)})
        if args.demo:
            rows.append({"build": "demo", **measure(REPO / "configs" / "demo.yaml", Path(tmp) / "wh-demo")})
    by_size = {row["build"]: row["peak_mb"] for row in rows}
    if len(args.sizes) >= 2:
        small, large = min(args.sizes), max(args.sizes)
        rows.append(
            {
                "build": f"ratio null-{large} / null-{small}",
                "peak_mb": round(by_size[f"null-{large}"] / by_size[f"null-{small}"], 2),
            }
        )
    report("memory", rows)


if __name__ == "__main__":
    main()
