"""Run bookkeeping: one ``runs`` row per run, rewritten as the run moves through its states.

A run id names a build's outputs. By default it is derived from the config name and hash, so
rebuilding an unchanged config rewrites the same partitions (identical tables, cache hits)
instead of piling up copies; pass an explicit id to keep several builds of one config apart.

States: ``running`` -> ``completed`` | ``partial`` (some shards failed) | ``failed`` (nothing
usable, or an error ended the run) | ``interrupted`` (SIGINT / SIGTERM; ``error`` names the
signal) | ``abandoned`` (the row said ``running`` but no live process held the run: killed with
SIGKILL, out of memory, machine lost). A run is ``running`` only while a process holds its lock
(``warehouse/runlock.py``): ``holding_run`` takes it before writing ``running``, and
``mark_abandoned_runs`` rewrites the ``running`` rows whose lock is free. A view cannot test a
lock, so the rewrite happens in the next process that looks: a build, an evaluation,
``ragfactory tables`` and ``ragfactory check``. In a warehouse shared through an object store,
a run another machine holds is judged by its Prefect flow run instead (``ended``): abandoned
once that flow run has ended (a worker reports a killed flow run ``Crashed``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator

from ragfactory.schemas.tables import SCHEMA_VERSION
from ragfactory.warehouse.runlock import (
    RunBusy,
    describe,
    lock_path,
    lock_within,
    open_lock,
    read_holder,
    try_lock,
    write_holder,
)
from ragfactory.warehouse.store import Warehouse, safe_name

RUN_SHARD = "run"
FINAL = ("completed", "partial", "failed", "interrupted", "abandoned")
# The runs this process holds, by lock file: a process-wide fact (the kernel's locks are per
# process), kept here so a signal handler can record every held run as interrupted.
_HELD: dict[str, RunHold] = {}
_HELD_LOCK = threading.Lock()


def default_run_id(name: str, config_hash: str) -> str:
    return safe_name(f"{name}-{config_hash[:10]}")


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def record_run(
    warehouse: Warehouse,
    run_id: str,
    flow: str,
    status: str,
    config: dict,
    config_hash: str,
    started_at: dt.datetime,
    failed_shards: list[str] | None = None,
    error: str | None = None,
    warnings: list[str] | None = None,
    inputs: list[dict] | None = None,
    flow_run_id: str | None = None,
) -> dict:
    """Write (or replace) the run's row; ``finished_at`` is set once the status is final.

    ``warnings`` are what the run wants a reader of its figures to know (a build that draws on
    held-out questions, an evaluation on questions its model trained on). ``inputs`` are the
    ingested versions it read, ``{"dataset", "version"}`` each (``ingests.version``): what
    selects its questions, and what a reader joins to ``ingests`` to see which file it was.
    ``flow_run_id`` is the Prefect flow run that ran it, for a link from the dashboard.
    """
    row = {
        "run_id": run_id,
        "flow": flow,
        "status": status,
        "schema_version": SCHEMA_VERSION,
        "config_hash": config_hash,
        "config": json.dumps(config, sort_keys=True),
        "started_at": started_at,
        "finished_at": None if status == "running" else now(),
        "failed_shards": sorted(failed_shards or []),
        "error": error,
        "warnings": list(warnings or []),
        "inputs": [{"dataset": i["dataset"], "version": i["version"]} for i in inputs or []],
        "flow_run_id": flow_run_id,
    }
    warehouse.write("runs", [row], shard=RUN_SHARD)
    return row


def interrupting_signal(exc: BaseException) -> str | None:
    """The signal an exception stands for (``SIGINT``, ``SIGTERM``), or None for any other error.

    KeyboardInterrupt is SIGINT; an exception with a ``signal`` number is a signal turned into an
    exception (Prefect's TerminationSignal, raised for SIGTERM while a flow runs in a worker).
    """
    if isinstance(exc, KeyboardInterrupt):
        return "SIGINT"
    number = getattr(exc, "signal", None)
    return signal.Signals(number).name if isinstance(number, int) else None


class RunHold:
    """A run this process holds: its lock file descriptor and the fields of its ``runs`` row.

    ``record`` and ``interrupt`` rewrite the row under one thread lock, so a signal handler's
    ``interrupted`` and the flow's own final state never interleave, and once interrupted the
    row keeps saying so.
    """

    def __init__(self, warehouse: Warehouse, run: dict):
        self.warehouse, self.run = warehouse, dict(run)
        self.status = "running"
        self._lock = threading.Lock()

    def record(self, status: str, **fields) -> None:
        with self._lock:
            if self.status == "interrupted":
                return
            record_run(self.warehouse, status=status, **(self.run | fields))
            self.status = status

    def interrupt(self, reason: str) -> bool:
        """Record the run ``interrupted`` (``reason`` as its error) unless it already ended."""
        with self._lock:
            if self.status != "running":
                return False
            record_run(self.warehouse, status="interrupted", error=reason, **self.run)
            self.status = "interrupted"
            return True


@contextlib.contextmanager
def holding_run(warehouse: Warehouse, wait_s: float = 10.0, **run) -> Iterator[RunHold]:
    """Hold the run's lock, record it ``running``, and yield the hold for its final ``record``.

    When the block raises, the row says ``interrupted`` (a signal, named in ``error``) or
    ``failed`` (any other error: its type and first line) before the exception goes on. Raises
    RunBusy, naming the holder, when another live process holds the run for ``wait_s`` seconds.
    """
    path = lock_path(warehouse.root, run["run_id"])
    fd = open_lock(path)
    hold = RunHold(warehouse, run)
    try:
        if not lock_within(fd, wait_s):
            raise RunBusy(
                f"run {run['run_id']} is running in {describe(read_holder(fd))} "
                f"(lock {path}): wait for it to end, or stop that process"
            )
        write_holder(fd, run_started_at=_stamp(run.get("started_at")))
        with _HELD_LOCK:
            _HELD[str(path)] = hold
        hold.record("running")
        try:
            yield hold
        except BaseException as exc:
            name = interrupting_signal(exc)
            if name:
                hold.interrupt(f"interrupted by {name}")
            elif hold.status == "running":
                message = str(exc).strip().splitlines()
                hold.record("failed", error=f"{type(exc).__name__}: {message[0] if message else ''}".rstrip(": "))
            raise
    finally:
        with _HELD_LOCK:
            _HELD.pop(str(path), None)
        os.close(fd)  # closing releases the lock; the file stays, naming its last holder


def interrupt_held_runs(reason: str) -> list[str]:
    """Record every run this process holds as ``interrupted`` with ``reason``; their run ids.

    For a signal handler: the runs' own threads may be blocked in an engine call, so the row is
    written from here, and the process may end right after (its locks go with it).
    """
    with _HELD_LOCK:
        holds = list(_HELD.values())
    return [hold.run["run_id"] for hold in holds if hold.interrupt(reason)]


# A run's Prefect flow run id -> the name of the final state it ended in, None while it runs or
# where nothing is known of it (no shared Prefect server).
FlowRunEnded = Callable[[str], "str | None"]


def _stamp(value: object) -> str:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat(timespec="seconds")
    return str(value)


def _held_here(holder: dict, row: dict) -> bool:
    """Whether this machine's lock file names the holder of this very row: a run of the same id
    held here before, and since on another machine, leaves a lock file here that does not."""
    if holder.get("host") != socket.gethostname():
        return False
    return holder.get("run_started_at", _stamp(row["started_at"])) == _stamp(row["started_at"])


def mark_abandoned_runs(warehouse: Warehouse, ended: FlowRunEnded | None = None) -> list[str]:
    """Rewrite as ``abandoned`` each ``running`` row whose lock no live process holds; their ids.

    In a warehouse shared through an object store, a lock is a local file, so another machine's
    live run would look abandoned from here: a run held on another machine is abandoned only
    when ``ended`` says its flow run has ended (``flows.runs.flow_run_ended`` asks the Prefect
    server the machines share); without ``ended`` it is left as it is.

    The row is re-read while this process holds the lock, so a run that ended meanwhile keeps its
    state and a build of it that starts now waits (``holding_run``'s ``wait_s``). A root this
    process cannot write (read-only) or whose runs cannot be read is left as it is: ``ragfactory
    check`` reports damaged files.
    """
    try:
        running = [row["run_id"] for row in warehouse.read("runs").to_pylist() if row["status"] == "running"]
    except Exception:  # noqa: BLE001 - a damaged runs file is check's to report, not ours to crash on
        return []
    return [run_id for run_id in running if _abandon(warehouse, run_id, ended)]


def _abandon(warehouse: Warehouse, run_id: str, ended: FlowRunEnded | None) -> bool:
    path = lock_path(warehouse.root, run_id)
    try:
        fd = open_lock(path)
    except OSError:
        return False
    try:
        if not try_lock(fd):
            return False
        holder = read_holder(fd)
        rows = warehouse.read("runs", run_id=run_id).to_pylist()
        if not rows or rows[0]["status"] != "running":
            return False
        error = f"abandoned: no live process holds it (last holder {describe(holder)})"
        if warehouse.store is not None and not _held_here(holder, rows[0]):
            # Held on another machine sharing the store: its lock is not here to test.
            state = ended(rows[0]["flow_run_id"]) if ended and rows[0].get("flow_run_id") else None
            if state is None:
                return False
            error = f"abandoned: its Prefect flow run {rows[0]['flow_run_id']} ended {state}"
        warehouse.write(
            "runs", [rows[0] | {"status": "abandoned", "finished_at": now(), "error": error}], shard=RUN_SHARD
        )
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
