"""When a failed task runs again: the ``retry_condition_fn`` of every task that has retries.

Ingest, expand and evaluate retry because an engine, a retrieval server or a disk can fail for a
moment. A missing file, a file that is not JSONL, an unknown model or a config that does not
validate fails the same way on every attempt, so those give up at once
(``schemas/errors.py`` :func:`is_permanent` decides) and the user hears about them seconds, not
minutes, later.
"""

from __future__ import annotations

from ragfactory.schemas.errors import is_permanent


def retry_unless_permanent(task, task_run, state) -> bool:
    """Prefect's ``retry_condition_fn``: retry a failed run unless its exception is permanent.

    ``state`` is the Failed state; its data (or result) is the exception the task raised. A
    state that carries no exception (a failure Prefect reported itself) retries as before.
    """
    exc = state.data if isinstance(state.data, BaseException) else _exception_of(state)
    return not is_permanent(exc)


def _exception_of(state) -> BaseException | None:
    try:
        result = state.result(raise_on_failure=False)
    except Exception:  # the result could not be read back (e.g. not persisted): retry as before
        return None
    return result if isinstance(result, BaseException) else None


def failure_reason(name: str, state) -> str:
    """What a failed task run raised, as its message (Prefect's state message when it raised
    nothing): the reason a flow reports for its failed shard ``name``. Logged with the
    traceback, which the run's log file keeps (Prefect logs none for a run that is not retried).
    """
    from prefect import get_run_logger

    error = _exception_of(state)
    reason = (str(error) or type(error).__name__) if error is not None else (state.message or state.name)
    get_run_logger().error("%s failed: %s", name, " ".join(reason.split()), exc_info=error)
    return reason
