"""Run bookkeeping every flow shares: hold and record the ``runs`` row, settle its status, and
turn the summary into the flow's final Prefect state.

A flow opens ``recorded_run`` around its work (abandoned rows of dead processes are marked
first, then the run's lock is held and its row says ``running``; an error or a signal inside the
block records ``failed`` or ``interrupted``, ``warehouse/runs.py``), ends the block with
``finish`` (``completed``, ``partial`` or ``failed`` from what failed and whether anything was
done), and returns ``final_state(summary)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from uuid import UUID

from prefect import get_run_logger
from prefect.runtime import flow_run
from prefect.states import Failed, State

from ragfactory.schemas.errors import PermanentError
from ragfactory.warehouse.runs import RunHold, holding_run, mark_abandoned_runs, now
from ragfactory.warehouse.store import Warehouse, folder_name_problem


class RunIdError(PermanentError, ValueError):
    """A run id that would not come back as it is from its partition folders."""


def opened_warehouse(root: str | None) -> Warehouse:
    """The flow's warehouse; one in an object store has its mirror pulled first (what other
    machines committed since), with a log line saying what came down."""
    wh = Warehouse(root)
    log_prefect_settings(get_run_logger())
    if pulled := wh.pull():
        get_run_logger().info("mirror of %s: %s", wh.location, pulled)
    return wh


def log_prefect_settings(logger) -> None:
    """One log line with the Prefect settings this flow runs under, as Prefect sees them (the
    command sets them before Prefect is imported: ``ragfactory/local_flows.py``)."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    logger.info(
        "prefect settings: home=%s server_startup_timeout_s=%s api=%s",
        settings.home,
        settings.server.ephemeral.startup_timeout_seconds,
        settings.api.url,
    )


def flow_run_ended(flow_run_id: str) -> str | None:
    """The name of the final state Prefect flow run ``flow_run_id`` ended in; None while it
    runs, or when the Prefect server this process talks to cannot say (it does not know that
    flow run, or cannot be reached): a run on another machine is judged by what its flow run
    says on the server the machines share (``warehouse.runs.mark_abandoned_runs``)."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(UUID(flow_run_id)).state
    except Exception:  # noqa: BLE001 - unknown here is "cannot say", never "ended"
        return None
    return state.name if state is not None and state.is_final() else None


def shared_flow_runs() -> Callable[[str], str | None] | None:
    """``flow_run_ended`` where this process talks to a Prefect server (``PREFECT_API_URL``);
    None otherwise, so a command never starts a temporary server just to ask."""
    from prefect.settings import PREFECT_API_URL

    return flow_run_ended if PREFECT_API_URL.value() else None


@contextlib.contextmanager
def recorded_run(
    wh: Warehouse, *, run_id: str, flow: str, config: dict, config_hash: str, warnings: Sequence[str] = ()
) -> Iterator[RunHold]:
    """Hold run ``run_id`` of ``flow`` for the block, its ``runs`` row ``running`` meanwhile.

    A run id its ``run_id=<id>`` folders would change (a space, a slash: a flow parameter, a
    deployment's) is refused before anything is written (``folder_name_problem``)."""
    if (problem := folder_name_problem(run_id, "run_id", "a run id")) is not None:
        raise RunIdError(f"run_id: {problem}")
    mark_abandoned_runs(wh, ended=flow_run_ended)
    run = {
        "run_id": run_id,
        "flow": flow,
        "config": config,
        "config_hash": config_hash,
        "started_at": now(),
        "warnings": list(warnings),
        "flow_run_id": flow_run.get_id(),
    }
    with holding_run(wh, **run) as hold:
        yield hold


def finish(hold: RunHold, failed: Sequence[str], anything_done: bool, unit: str = "shards", **fields) -> str:
    """Record the run's final status and return it: ``completed`` when nothing failed,
    ``partial`` when some ``unit`` failed but something was done, else ``failed``."""
    status = "completed" if not failed else ("partial" if anything_done else "failed")
    hold.record(
        status, failed_shards=list(failed), error=f"failed {unit}: {list(failed)}" if failed else None, **fields
    )
    return status


def final_state(summary: dict) -> dict | State:
    """What a flow returns: its summary when ``status`` is ``completed``; otherwise a Failed state
    named after the status (``Partial``, ``Failed``) whose data is the summary."""
    if summary["status"] == "completed":
        return summary
    failed = summary["failed_shards"]
    return Failed(
        name=summary["status"].capitalize(),
        data=summary,
        message=f"run {summary['run_id']} is {summary['status']}: {len(failed)} failed shard(s): {', '.join(failed)}",
    )
