"""Running a flow in this process from a command: its own Prefect home, its result, its signals.

``prefect_local_defaults`` gives each command a Prefect home of its own (see its docstring).
``run_flow`` turns the flow's final state into its summary. ``run_until_signal`` runs the flow
in a worker thread while the main thread waits for it or for a signal. Why a thread: Prefect replaces the SIGTERM handler of the thread that runs a flow with
one that raises inside the flow and then waits for every running task to return (its thread
pool's shutdown), which lasts as long as the slowest engine call in flight. Off the main thread
Prefect installs no handler, and the main thread answers the signal at once:

1. every run this process holds is recorded ``interrupted``, ``error`` naming the signal
   (``warehouse.runs.interrupt_held_runs``);
2. one line tells the user what happened and how to go on;
3. every process this one started, at any depth (Prefect's temporary API server, engine servers),
   gets SIGTERM, then SIGKILL after ``grace_s``;
4. the process ends with ``os._exit(128 + signal)``: 130 for SIGINT, 143 for SIGTERM. ``_exit``
   because the flow's threads may be blocked in an engine call, and interpreter shutdown would
   wait for them.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path

import psutil

from ragfactory.prefect_database import seed_new_home
from ragfactory.stack_marker import running_stack_api
from ragfactory.watchdog import HOME_PREFIX, end_processes, remove_stale_homes

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_flow(call: Callable, echo: Callable[[str], None], cleanup: Callable[[], None]) -> dict:
    """The summary of the flow run ``call`` starts and returns the final state of.

    A Failed state that carries a summary (a partial run) gives the summary; any other failure
    raises its exception. SIGINT / SIGTERM record the run interrupted, stop every process this
    command started, and exit 130 / 143 (``run_until_signal``, whose ``echo`` prints the one line).
    """
    state = run_until_signal(call, echo, cleanup)
    result = state.result(raise_on_failure=False)
    if isinstance(result, BaseException):
        raise result
    return result


def prefect_local_defaults(temporary_home: bool = True) -> Callable[[], None]:
    """Settings for running flows in this process, set before Prefect is imported; returns the
    function that removes what this made (also run at exit).

    Unless a Prefect API is configured (``_configured_api_url``), flows talk to a temporary
    server that Prefect starts, whose SQLite database lives in PREFECT_HOME. Two commands sharing
    one PREFECT_HOME migrate one database at once and fail (``duplicate column name``), so each
    command gets its own temporary PREFECT_HOME, named after its pid so that the next command
    removes it if this one is killed (``ragfactory.watchdog``); the user's profiles file stays in
    use (PREFECT_PROFILES_PATH). Flow history then lives as long as the command: point
    PREFECT_API_URL at a server to keep it, or run ``ragfactory serve`` on the warehouse
    (``report_to_serving_stack``). Without ``temporary_home``
    (``ragfactory serve``, whose server keeps its history in the user's home) only the server
    settings are set.
    """
    # On small, busy machines the ephemeral API server can take over 20 s to start.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # The machines a build runs on often have no route out; telemetry would only log errors.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    remove_stale_homes()
    if not temporary_home or _configured_api_url():
        return lambda: None
    profiles = _profiles_path()
    if profiles.exists():
        os.environ.setdefault("PREFECT_PROFILES_PATH", str(profiles))
    home = tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{os.getpid()}-")
    os.environ["PREFECT_HOME"] = home
    seed_new_home(os.environ)  # its server then starts without migrating (ragfactory/prefect_database.py)

    def cleanup() -> None:
        shutil.rmtree(home, ignore_errors=True)

    atexit.register(cleanup)
    return cleanup


def report_to_serving_stack(root: str | Path) -> str | None:
    """Point this process's flows at the server of the ``ragfactory serve`` that serves warehouse
    ``root`` (``ragfactory/stack_marker.py``), so the stack's UI shows their runs; its API address,
    or None (a configured PREFECT_API_URL wins, and no live stack leaves the temporary server).
    Called before Prefect is imported, as the other settings here."""
    if _configured_api_url() or not (api_url := running_stack_api(root)):
        return None
    os.environ["PREFECT_API_URL"] = api_url
    return api_url


def _profiles_path() -> Path:
    home = Path(os.environ.get("PREFECT_HOME", "~/.prefect")).expanduser()
    return Path(os.environ.get("PREFECT_PROFILES_PATH", home / "profiles.toml")).expanduser()


def _configured_api_url() -> str | None:
    """PREFECT_API_URL from the environment, else from the active Prefect profile, else None."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    try:
        profiles = tomllib.loads(_profiles_path().read_text())
    except (OSError, ValueError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active", "ephemeral")
    return profiles.get("profiles", {}).get(active, {}).get("PREFECT_API_URL")


class _Signalled(BaseException):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, frame) -> None:
    raise _Signalled(signum)


def run_until_signal(
    call: Callable[[], object],
    echo: Callable[[str], None],
    cleanup: Callable[[], None] = lambda: None,
    grace_s: float = 10.0,
) -> object:
    """``call()``'s result (or its exception), unless SIGINT / SIGTERM comes first: then the
    four steps of the module docstring, ``cleanup()`` before the exit; this never returns."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as it is
            outcome["error"] = exc

    previous = {signum: signal.signal(signum, _raise) for signum in SIGNALS}
    try:
        worker = threading.Thread(target=target, name="flow", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.2)
    except _Signalled as received:
        for signum in SIGNALS:  # a second Ctrl-C must not cut the cleanup short
            signal.signal(signum, signal.SIG_IGN)
        stop(received.signum, echo, cleanup, grace_s)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def stop(signum: int, echo: Callable[[str], None], cleanup: Callable[[], None], grace_s: float) -> None:
    from ragfactory.warehouse.runs import interrupt_held_runs

    name = signal.Signals(signum).name
    runs = interrupt_held_runs(f"interrupted by {name}")
    if runs:
        echo(
            f"interrupted by {name}: run {', '.join(runs)} recorded as interrupted; its finished shards "
            "are kept, and the same command goes on from them"
        )
    else:
        echo(f"interrupted by {name} before a run started: nothing was recorded")
    sys.stdout.flush()
    sys.stderr.flush()
    _silence()  # the flow's threads, cut off from their API server, would print tracebacks
    stop_descendants(grace_s)
    cleanup()
    os._exit(128 + signum)


def _silence() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def stop_descendants(grace_s: float) -> list[int]:
    """SIGTERM every descendant of this process, SIGKILL those alive after ``grace_s``; their pids."""
    children = psutil.Process().children(recursive=True)
    end_processes(children, grace_s)
    return [child.pid for child in children]
