"""What benchmarks/served.py counts of vLLM's server: its Prometheus counters summed over engines,
and the CPU of a process tree whose work is done in a grandchild. No vLLM."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "served.py"
_spec = importlib.util.spec_from_file_location("served", SCRIPT)
served = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("served", served)  # its dataclass looks its module up there
_spec.loader.exec_module(served)

METRICS = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="smollm2"} 1200.0
vllm:prefix_cache_queries_total{engine="1",model_name="smollm2"} 800.0
vllm:prefix_cache_hits_total{engine="0",model_name="smollm2"} 1.5e3
vllm:prompt_tokens_total{engine="0",model_name="smollm2"} 2000.0
vllm:prompt_tokens_created{engine="0",model_name="smollm2"} 1.7e9
vllm:generation_tokens_total 96
vllm:num_requests_running{engine="0",model_name="smollm2"} 3.0
"""


def test_counters_are_summed_over_engines_and_others_ignored():
    assert served.parse_counters(METRICS) == {
        "vllm:prefix_cache_queries_total": 2000.0,
        "vllm:prefix_cache_hits_total": 1500.0,
        "vllm:prompt_tokens_total": 2000.0,
        "vllm:generation_tokens_total": 96.0,
    }


def test_a_trees_cpu_counts_a_grandchilds_work():
    spin = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    parent = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {spin!r}])\ntime.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", parent])
    try:
        deadline = time.monotonic() + 20
        while sum(served.tree_cpu(proc.pid)) < 0.4 and time.monotonic() < deadline:
            time.sleep(0.1)
        tree = served._tree(proc.pid)
        assert len(tree) == 2 and proc.pid in tree  # the parent and the spinning child
        assert sum(served.tree_cpu(proc.pid)) >= 0.4  # the child's 0.4 s, and the two interpreters' start
        assert len(served.tree_peaks_kib(proc.pid)) == 2
        assert min(served.tree_peaks_kib(proc.pid)) > 1024  # a live interpreter holds over 1 MiB
    finally:
        for pid in served._tree(proc.pid):
            subprocess.run(["kill", str(pid)], check=False)
        proc.wait()
