"""The local orchestration stack: a Prefect server, the work pools, the deployments, workers.

``ragfactory serve`` and the end-to-end tests drive the ``prefect`` command line as
subprocesses, exactly as a person would by hand, so what is tested is the real server, the
real ``prefect deploy`` of ``prefect.yaml`` and real process workers. Nothing here imports
prefect: the server is reached over HTTP (health, variables) and the CLI does the rest.

Every child starts in its own process group (ragfactory/process_groups.py), so a Ctrl-C in the
terminal reaches only this process, which then stops the workers (and the flow runs they
started) before the server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ragfactory.prefect_database import seed_new_home
from ragfactory.process_groups import spawn, stop

REPO = Path(__file__).resolve().parents[1]
POOLS = ("cpu", "gpu")
# the worker setting that maps a job's CUDA request to this machine's CPU (tasks/llm/device.py)
LOCAL_DEVICE_ENV = "RAGFACTORY_LOCAL_DEVICE"
TIMEZONE_VARIABLE = "ragfactory_timezone"
# Runs wait this long at most before a worker picks them up (Prefect's default is 10 s).
WORKER_QUERY_SECONDS = "3"


class StackError(RuntimeError):
    """A part of the stack that did not start, or a CLI step that failed."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on ``host:port`` (another Prefect server often does).

    The probe binds as the servers do, with ``SO_REUSEADDR``: a port whose last connections
    linger in TIME_WAIT after a Ctrl-C is free to them, so it is free here too, and a restart
    comes up at once instead of a minute later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def stack_env(
    api_url: str, prefect_home: str | Path | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of every child: this one, pointed at the server at ``api_url``."""
    env = dict(os.environ)
    if prefect_home is not None:
        env["PREFECT_HOME"] = str(prefect_home)
    env.update(
        {
            "PREFECT_API_URL": api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_CLI_PROMPT": "false",
        }
    )
    # A busy two-core machine needs minutes, not seconds, for a first start (migrations).
    env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    env.setdefault("PREFECT_WORKER_QUERY_SECONDS", WORKER_QUERY_SECONDS)
    env.update(extra or {})
    return env


def prefect_command(*args: str) -> list[str]:
    """The ``prefect`` CLI of this interpreter's environment."""
    return [sys.executable, "-m", "prefect", *args]


def start_server(port: int, env: dict[str, str], log: Path | None = None) -> subprocess.Popen:
    """``prefect server start`` on 127.0.0.1:``port``; returns at once (see ``wait_healthy``)."""
    return spawn(
        prefect_command("server", "start", "--host", "127.0.0.1", "--port", str(port), "--analytics-off"),
        env,
        log,
        REPO,
    )


def wait_healthy(api_url: str, process: subprocess.Popen | None = None, timeout: float = 240.0) -> None:
    """Wait until ``<api_url>/health`` answers; fail early if the server process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise StackError(f"prefect server exited with code {process.returncode} before it was healthy")
        try:
            if httpx.get(f"{api_url}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise StackError(f"prefect server at {api_url} not healthy after {timeout:.0f} s")


def run_cli(
    args: Iterable[str], env: dict[str, str], timeout: float = 600.0, cwd: Path = REPO
) -> subprocess.CompletedProcess:
    """Run one ``prefect`` CLI command to completion; its output is in the error if it fails."""
    args = list(args)
    done = subprocess.run(
        prefect_command(*args), env=env, cwd=cwd, capture_output=True, check=False, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise StackError(
            f"prefect {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    return done


def create_pools(env: dict[str, str], pools: Iterable[str] = POOLS) -> None:
    """Create the process work pools (``--overwrite``: running it again is harmless)."""
    for pool in pools:
        run_cli(["work-pool", "create", pool, "--type", "process", "--overwrite"], env)


def set_timezone(api_url: str, timezone: str | None) -> str:
    """Set the nightly build's schedule timezone (a Prefect variable read at deploy time).

    ``None`` keeps the variable when it exists and sets UTC when it does not; returns the value.
    """
    url = f"{api_url}/variables/name/{TIMEZONE_VARIABLE}"
    current = httpx.get(url, timeout=30)
    if current.status_code == 200:
        if timezone is None or current.json()["value"] == timezone:
            return current.json()["value"]
        httpx.patch(url, json={"value": timezone}, timeout=30).raise_for_status()
        return timezone
    timezone = timezone or "UTC"
    httpx.post(
        f"{api_url}/variables/", json={"name": TIMEZONE_VARIABLE, "value": timezone}, timeout=30
    ).raise_for_status()
    return timezone


def deploy(env: dict[str, str], repo: Path = REPO, names: Iterable[str] = ()) -> str:
    """``prefect --no-prompt deploy`` of the repository's prefect.yaml: every deployment, or ``names``.

    The pull step points flow runs at ``$PWD``, so that is set to the repository here.
    """
    selection = [arg for name in names for arg in ("--name", name)] or ["--all"]
    done = run_cli(["--no-prompt", "deploy", *selection], env | {"PWD": str(repo)}, cwd=repo)
    return done.stdout


def deployment_pools(repo: Path = REPO) -> list[str]:
    """The work pools prefect.yaml's deployments run on: ``serve`` starts a worker for each, so
    no deployment's run waits forever for one."""
    import yaml

    spec = yaml.safe_load((repo / "prefect.yaml").read_text(encoding="utf-8"))
    return sorted({d["work_pool"]["name"] for d in spec.get("deployments") or [] if d.get("work_pool")})


def has_cuda() -> bool:
    """Whether an NVIDIA driver is loaded here (read from /proc, without importing torch)."""
    return Path("/proc/driver/nvidia/version").exists()


def pool_env(pool: str, cuda: bool | None = None) -> dict[str, str]:
    """What a worker of ``pool`` adds to the stack's environment: on a machine without CUDA the
    ``gpu`` pool's worker maps its jobs' CUDA and vLLM to the CPU and transformers, so training
    submitted to it runs here instead of failing."""
    cuda = has_cuda() if cuda is None else cuda
    return {LOCAL_DEVICE_ENV: "cpu"} if pool == "gpu" and not cuda else {}


def start_worker(pool: str, env: dict[str, str], log: Path | None = None) -> subprocess.Popen:
    """A process worker polling ``pool``; it runs each flow run as a child process."""
    return spawn(
        prefect_command(
            "worker",
            "start",
            "--pool",
            pool,
            "--type",
            "process",
            "--name",
            f"ragfactory-{pool}",
            "--install-policy",
            "never",
        ),
        env,
        log,
        REPO,
    )


def start_dashboard(port: int, env: dict[str, str], log: Path | None = None) -> subprocess.Popen:
    """``ragfactory dashboard`` on 127.0.0.1:``port``, submitting to the stack's server
    (``PREFECT_API_URL`` in ``env``) and reading its warehouse (``RAGFACTORY_HOME``)."""
    return spawn(
        [
            sys.executable,
            "-m",
            "ragfactory.cli",
            "dashboard",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-banner",
        ],
        env,
        log,
        REPO,
    )  # serve prints the address


@dataclass
class Stack:
    """A running server and its workers; ``stop()`` ends them, workers first."""

    port: int
    env: dict[str, str]
    server: subprocess.Popen
    log_dir: Path | None = None
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)
    dashboard: subprocess.Popen | None = None
    dashboard_port: int | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self, name: str) -> Path | None:
        return self.log_dir / f"{name}.log" if self.log_dir else None

    def add_worker(self, pool: str) -> subprocess.Popen:
        self.workers[pool] = start_worker(pool, self.env | pool_env(pool), self.log(f"worker-{pool}"))
        return self.workers[pool]

    @property
    def dashboard_url(self) -> str | None:
        return f"http://127.0.0.1:{self.dashboard_port}" if self.dashboard_port else None

    def add_dashboard(self, port: int) -> subprocess.Popen:
        self.dashboard_port = port
        self.dashboard = start_dashboard(port, self.env, self.log("dashboard"))
        return self.dashboard

    def exited(self) -> list[str]:
        """The parts of the stack that are no longer running."""
        parts = {"server": self.server, **{f"worker {p}": w for p, w in self.workers.items()}}
        if self.dashboard is not None:
            parts["dashboard"] = self.dashboard
        return [name for name, process in parts.items() if process.poll() is not None]

    def stop(self) -> None:
        if self.dashboard is not None:
            stop(self.dashboard)
        for worker in self.workers.values():
            stop(worker)
        stop(self.server)


def start_stack(
    port: int | None = None,
    prefect_home: str | Path | None = None,
    log_dir: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float = 240.0,
) -> Stack:
    """Start the server and wait until it is healthy (the server is stopped if that fails)."""
    port = port or free_port()
    env = stack_env(f"http://127.0.0.1:{port}/api", prefect_home, extra_env)
    seed_new_home(env)
    server = start_server(port, env, log_dir / "server.log" if log_dir else None)
    stack = Stack(port=port, env=env, server=server, log_dir=log_dir)
    try:
        wait_healthy(stack.api_url, stack.server, timeout)
    except BaseException:
        stack.stop()
        raise
    return stack


def _bring_up(
    stack: Stack,
    timezone: str | None,
    pools: Iterable[str],
    echo,
    stopping: threading.Event,
    dashboard_port: int | None = None,
) -> bool:
    """Pools, the schedule's timezone, the deployments, the workers and the dashboard; False if
    stopped first."""
    create_pools(stack.env)
    echo(f"nightly-build runs at 02:00 {set_timezone(stack.api_url, timezone)}")
    echo("deploying prefect.yaml ...")
    deploy(stack.env)
    if stopping.is_set():
        return False
    for pool in pools:
        stack.add_worker(pool)
    if dashboard_port:
        stack.add_dashboard(dashboard_port)
    return True


def _refuse_unservable(port: int, root: str | Path | None, dashboard_port: int | None) -> None:
    from ragfactory.warehouse.objectstore import is_remote

    if is_remote(root):
        raise StackError(
            f"--root {root}: the stack serves a local warehouse (its workers' home); "
            "deployed flows write to an object store through their config's warehouse.root"
        )
    if not port_is_free(port):
        raise StackError(f"127.0.0.1:{port} is in use (another Prefect server?); pick one with --port")
    if dashboard_port and not port_is_free(dashboard_port):
        raise StackError(f"127.0.0.1:{dashboard_port} is in use; pick another with --dashboard-port (0: none)")


def _announce(stack: Stack, pools: list[str], echo) -> None:
    """Print where the Prefect UI and the dashboard are."""
    echo(f"Prefect UI: {stack.ui_url}  (workers: {', '.join(pools)}; Ctrl-C stops everything)")
    if stack.dashboard_url:
        echo(f"dashboard: {stack.dashboard_url}")


def _wait_until_stopped(stack: Stack, stopping: threading.Event) -> None:
    """Wait for Ctrl-C or SIGTERM; a part of the stack that exits first ends the wait with an error."""
    while not stopping.wait(1.0):
        if gone := stack.exited():
            raise StackError(f"{', '.join(gone)} exited; stopping")


def serve(
    port: int = 4200,
    root: str | Path | None = None,
    timezone: str | None = None,
    pools: Iterable[str] | None = None,
    prefect_home: Path | None = None,
    log_dir: Path | None = None,
    echo=print,
    dashboard_port: int | None = 8765,
) -> None:
    """Start the whole stack, print the UI and dashboard addresses, and stop it all on Ctrl-C or
    SIGTERM. ``pools`` None: a worker for every pool the deployments use. ``dashboard_port``
    None or 0: no dashboard."""
    from ragfactory.stack_marker import remove_marker, write_marker
    from ragfactory.warehouse.store import default_root

    pools = list(pools) if pools is not None else deployment_pools()
    _refuse_unservable(port, root, dashboard_port)
    extra = {"RAGFACTORY_HOME": str(root)} if root is not None else None
    served = Path(root).expanduser() if root is not None else default_root()
    stopping = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    stack = None
    try:
        echo(f"starting prefect server on 127.0.0.1:{port} ...")
        stack = start_stack(port, prefect_home, log_dir, extra)
        if not stopping.is_set() and _bring_up(stack, timezone, pools, echo, stopping, dashboard_port):
            write_marker(served, stack.api_url)  # commands on this warehouse report to this server
            _announce(stack, pools, echo)
        _wait_until_stopped(stack, stopping)
    except StackError:
        if not stopping.is_set():  # a CLI step cut short by Ctrl-C is not an error
            raise
    finally:
        remove_marker(served)
        if stack is not None:
            echo("stopping the dashboard, workers and server ...")
            stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
