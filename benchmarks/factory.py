"""The factory's own throughput: nodes per second on the null engine, per strategy and for the build.

Each strategy is built alone at its config defaults (the papers' parameters) on about
``--questions`` bundled train questions, then all five together, through the real build flow
(ingest, BM25, expansion, valuation, exports, catalog) with ``backend: null``
(``tasks/llm/null_backend.py``: grammar-valid random tokens, no forward pass). Reported per build:
the nodes it wrote, its wall seconds, nodes per second over the whole build and over the build
less a build with no strategy (ingest, index and catalog: the same whatever the strategies), and
the share of the wall time spent outside the engine (the engine's busy time is measured by a
wrapper around it: the union of its calls' intervals, so calls from concurrent shards count once).
On a machine shared with other work, wall time says more about the neighbours than about the
factory, so the CPU seconds of this process (all its threads; Prefect's server is a process of
its own) are reported too: nodes per CPU second, and the share of that CPU time spent outside the
engine's calls. The factory's Python runs mostly on one core (the GIL), so nodes per CPU second is
about what an otherwise idle machine's wall clock would give.

``--profile`` runs the all-strategy build once more under cProfile, one profiler per thread
(Prefect runs tasks in worker threads) merged at the end, and prints the five functions with the
most own time outside the engine (the null engine's module and llguidance's methods left out).

``--marginal SMALL LARGE`` builds every strategy on SMALL and on LARGE questions and reports the
marginal rate: the nodes the larger build wrote beyond the smaller one's, over the seconds it
took beyond them (wall and CPU). Fixed costs (Prefect, imports, ingest, index, catalog, the
exports' per-build work) cancel out, so this is what each further node costs at scale.

The machine's cores are shared with whatever else runs: compare figures within one run.

Run: .venv/bin/python benchmarks/factory.py [--questions 30] [--profile] [--marginal 50 200]
Writes benchmarks/results/factory.json (and factory_profile.json with --profile).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import NULL_STRATEGIES, null_build_config, report  # noqa: E402

from ragfactory.local_flows import prefect_local_defaults  # noqa: E402

prefect_local_defaults()  # as `ragfactory build` runs: a temporary Prefect server of its own
from ragfactory.flows.build import build  # noqa: E402
from ragfactory.flows.config import BuildConfig  # noqa: E402
from ragfactory.tasks.llm.null_backend import make_null_backend  # noqa: E402
from ragfactory.tasks.llm.registry import register_backend  # noqa: E402
from ragfactory.warehouse.store import Warehouse  # noqa: E402

ENGINE = "bench:null"
ENGINE_CODE = ("null_backend.py", "LLMatcher", "LLTokenizer")  # the engine's own frames in a profile


class BusyClock:
    """Seconds during which at least one engine call was running, and the CPU seconds they took."""

    def __init__(self):
        self._lock, self._running, self._since, self.busy_s, self.cpu_s = threading.Lock(), 0, 0.0, 0.0, 0.0

    def start(self) -> float:
        """Note a call's start; returns the thread's CPU clock for ``done``."""
        with self._lock:
            if self._running == 0:
                self._since = time.perf_counter()
            self._running += 1
        return time.thread_time()

    def done(self, cpu_started: float) -> None:
        with self._lock:
            self.cpu_s += time.thread_time() - cpu_started
            self._running -= 1
            if self._running == 0:
                self.busy_s += time.perf_counter() - self._since


CLOCK = BusyClock()


class TimedEngine:
    """The null engine, its calls timed on ``CLOCK``."""

    def __init__(self, inner):
        self.inner, self.fingerprint = inner, inner.fingerprint

    def generate_batch(self, requests):
        started = CLOCK.start()
        try:
            return self.inner.generate_batch(requests)
        finally:
            CLOCK.done(started)


def timed_null(role, cache_dir):
    engine = make_null_backend(role, cache_dir)
    engine.load()  # once per process: the tokenizer's load is set-up, not throughput
    return TimedEngine(engine)


def run(root: Path, questions: int, strategies, run_id: str) -> dict:
    """One build: its wall seconds, the engine's busy seconds and the nodes it wrote."""
    config = BuildConfig.model_validate(null_build_config(root, questions, strategies, backend=ENGINE))
    busy, engine_cpu, cpu, start = CLOCK.busy_s, CLOCK.cpu_s, time.process_time(), time.perf_counter()
    summary = build(config, run_id=run_id)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    if summary["status"] != "completed":
        raise SystemExit(f"{run_id}: {summary['status']}: {summary['errors']}")
    nodes = Warehouse(root).read("nodes", run_id=run_id).num_rows if strategies else 0
    return {
        "wall_s": wall,
        "engine_s": CLOCK.busy_s - busy,
        "nodes": nodes,
        "cpu_s": cpu,
        "engine_cpu_s": CLOCK.cpu_s - engine_cpu,
    }


def row(name: str, result: dict, baseline_s: float) -> dict:
    wall, engine = result["wall_s"], result["engine_s"]
    return {
        "build": name,
        "nodes": result["nodes"],
        "wall_s": round(wall, 1),
        "nodes_per_s": round(result["nodes"] / wall, 1),
        # None when the build took less than the no-strategy one: noise, not a rate
        "nodes_per_s_past_ingest": round(result["nodes"] / (wall - baseline_s), 1) if wall > baseline_s else None,
        "engine_s": round(engine, 1),
        "outside_engine_share": round(1 - engine / wall, 3),
        "cpu_s": round(result["cpu_s"], 1),
        "nodes_per_cpu_s": round(result["nodes"] / result["cpu_s"], 1),
        "outside_engine_cpu_share": round(1 - result["engine_cpu_s"] / result["cpu_s"], 3),
    }


def marginal(small: dict, large: dict, questions: tuple[int, int]) -> dict:
    """Nodes per second of the larger build beyond the smaller one, in wall and CPU seconds."""
    nodes, wall, cpu = (large[k] - small[k] for k in ("nodes", "wall_s", "cpu_s"))
    return {
        "questions": f"{questions[0]} -> {questions[1]}",
        "nodes": f"{small['nodes']} -> {large['nodes']}",
        "wall_s": f"{small['wall_s']:.1f} -> {large['wall_s']:.1f}",
        "marginal_nodes_per_s": round(nodes / wall, 1) if wall > 0 else None,
        "marginal_nodes_per_cpu_s": round(nodes / cpu, 1) if cpu > 0 else None,
    }


def profiled(fn):
    """``fn()`` with a cProfile profiler in every thread it starts; (its result, merged stats)."""
    profilers: list[cProfile.Profile] = []

    def start(*_):
        profiler = cProfile.Profile(time.thread_time)  # CPU time: a thread waiting costs none
        profilers.append(profiler)
        profiler.enable()  # replaces this hook in the thread with the profiler itself

    main = cProfile.Profile(time.thread_time)
    threading.setprofile(start)
    main.enable()
    try:
        result = fn()
    finally:
        main.disable()
        threading.setprofile(None)
    stats = pstats.Stats(main)
    for profiler in profilers:
        profiler.create_stats()
        stats.add(profiler)
    return result, stats


def top_outside_engine(stats: pstats.Stats, n: int = 5) -> list[dict]:
    """The ``n`` functions with the most own time, the engine's own code left out."""
    total = sum(entry[2] for entry in stats.stats.values())
    ranked = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)
    rows = []
    for (path, line, name), (_, calls, own, cumulative, _) in ranked:
        if any(code in path or code in name for code in ENGINE_CODE):
            continue
        rows.append(
            {
                "function": f"{Path(path).name}:{line}({name})",
                "calls": calls,
                "own_s": round(own, 2),
                "own_share": round(own / total, 3),
                "cumulative_s": round(cumulative, 2),
            }
        )
        if len(rows) == n:
            break
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--strategies", nargs="+", default=list(NULL_STRATEGIES))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--marginal", nargs=2, type=int, metavar=("SMALL", "LARGE"))
    args = parser.parse_args()
    register_backend(ENGINE, timed_null, shared=False, replace=True)  # as ``null`` registers
    with tempfile.TemporaryDirectory() as tmp:
        # a warehouse per build: in a shared one the next build's shards would be cache hits
        roots = (Path(tmp) / f"wh{i}" for i in range(100))
        run(next(roots), args.questions, [], "warm-up")  # Prefect's server and imports
        if args.marginal:
            small, large = (run(next(roots), n, args.strategies, f"marginal-{n}") for n in args.marginal)
            report("factory_marginal", [marginal(small, large, tuple(args.marginal))])
            return
        baseline = run(next(roots), args.questions, [], "baseline")["wall_s"]
        rows = [row(s, run(next(roots), args.questions, [s], f"only-{s}"), baseline) for s in args.strategies]
        rows.append(row("all", run(next(roots), args.questions, args.strategies, "all"), baseline))
        rows.append({"build": "no strategy (baseline)", "wall_s": round(baseline, 1)})
        report("factory", rows)
        if args.profile:
            _, stats = profiled(lambda: run(next(roots), args.questions, args.strategies, "profiled"))
            report("factory_profile", top_outside_engine(stats))


if __name__ == "__main__":
    main()
