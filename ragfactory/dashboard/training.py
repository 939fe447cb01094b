"""The Train page's work: check a build has rows for a method, then start the method's deployment.

A training is a Prefect flow run of the ``train/train-<method>`` deployment (``prefect.yaml``),
created through Prefect's client exactly as the UI's Run button does; the worker of the
deployment's pool runs it, and the page follows its state. Nothing is submitted for a build that
has no rows in the method's export table: the refusal names the table and the build.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ragfactory.dashboard.queries import Reader, build_ids, export_rows

FINAL_STATES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
# the trainer's progress line (tasks/training/progress.py): "step 3/10 (30%) loss 0.6931 lr 5.00e-05 eta 01m02s"
PROGRESS = re.compile(r"step \d+/\d+ \(\d+%\) loss \S+ lr \S+ eta \S+")


def method_tables() -> dict[str, str]:
    """Every training method and the export table it reads by default."""
    from ragfactory.tasks.training.methods import METHODS

    return {name: spec.table for name, spec in METHODS.items()}


def deployment_name(method: str) -> str:
    return f"train/train-{method}"


def refusal(reader: Reader, run_id: str, method: str) -> str | None:
    """Why ``method`` cannot train on build ``run_id``, or None when it can."""
    tables = method_tables()
    if method not in tables:
        return f"unknown method {method!r}; known: {', '.join(tables)}"
    if run_id not in build_ids(reader):
        return f"no build run {run_id!r} in the warehouse"
    table = tables[method]
    if export_rows(reader, run_id, table) == 0:
        return (
            f"build {run_id} has no {table} rows, which {method} trains on "
            f"(its strategies exported none); pick another build or method"
        )
    return None


def parse_json_object(field: str, text: str) -> dict[str, Any]:
    """The JSON object typed into a form field; ValueError naming the field otherwise."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"{field}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{field}: a JSON object {{...}} is expected, not {type(value).__name__}")
    return value


def train_config(method: str, run_id: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The flow's ``config`` parameter, checked by ``TrainConfig`` before anything is submitted."""
    from pydantic import ValidationError

    from ragfactory.cli.common import validation_message
    from ragfactory.flows.config import TrainConfig

    config = {**overrides, "method": method, "run_id": run_id}
    try:
        TrainConfig(**config)
    except ValidationError as exc:
        raise ValueError("; ".join(validation_message(e) for e in exc.errors())) from None
    return config


@dataclass(frozen=True)
class Prefect:
    """The Prefect server the dashboard submits to (``api_url`` ends in ``/api``)."""

    api_url: str

    @property
    def ui_url(self) -> str:
        return self.api_url.removesuffix("/").removesuffix("/api")

    def flow_run_url(self, flow_run_id: str) -> str:
        return f"{self.ui_url}/runs/flow-run/{flow_run_id}"

    def _client(self):
        from prefect.client.orchestration import SyncPrefectClient

        return SyncPrefectClient(self.api_url)

    def existing_flow_runs(self, ids: list[str]) -> set[str] | None:
        """Which of the flow runs ``ids`` this server holds (a build run by a temporary server,
        as ``ragfactory build`` starts, is on none); None when the server did not answer."""
        from uuid import UUID

        import httpx
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        wanted = [UUID(i) for i in ids if _is_uuid(i)]
        if not wanted:
            return set()
        try:
            with self._client() as client:
                found = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=wanted)))
        except (httpx.HTTPError, OSError):
            return None
        return {str(run.id) for run in found}

    def default_config(self, method: str) -> dict[str, Any]:
        """The deployment's own ``config`` parameter (what its Run button would send)."""
        with self._client() as client:
            deployment = client.read_deployment_by_name(deployment_name(method))
        return dict(deployment.parameters.get("config") or {})

    def submit(self, method: str, config: dict[str, Any], job_variables: dict[str, Any]) -> str:
        """Create a flow run of the method's deployment; its id. ValueError when the server cannot
        be reached, has no such deployment (prefect.yaml not deployed there), or no worker polls
        the deployment's work pool (nothing would ever pick the run up)."""
        import httpx
        from prefect.exceptions import ObjectNotFound

        try:
            with self._client() as client:
                deployment = client.read_deployment_by_name(deployment_name(method))
                if problem := idle_pool(client, deployment.work_pool_name):
                    raise ValueError(f"{deployment_name(method)} would wait forever (Late): {problem}")
                flow_run = client.create_flow_run_from_deployment(
                    deployment.id,
                    parameters={"config": config},
                    job_variables=job_variables or None,
                    tags=["dashboard"],
                )
        except ObjectNotFound:
            raise ValueError(
                f"the Prefect server at {self.api_url} has no deployment {deployment_name(method)}: "
                "deploy prefect.yaml there (`ragfactory serve` does)"
            ) from None
        except httpx.HTTPError as exc:
            raise ValueError(f"the Prefect server at {self.api_url} did not answer: {exc}") from None
        return str(flow_run.id)

    def state(self, flow_run_id: str) -> dict[str, Any]:
        """A flow run's state: ``name`` (e.g. Completed), ``type``, ``message``, ``final``, and
        ``progress``: the newest trainer step line in its logs (step, loss, learning rate, eta)."""
        from uuid import UUID

        from prefect.client.schemas.sorting import LogSort

        with self._client() as client:
            flow_run = client.read_flow_run(UUID(flow_run_id))
            logs = client.read_logs(log_filter=_run_logs(flow_run_id), limit=200, sort=LogSort.TIMESTAMP_DESC)
        state = flow_run.state
        kind = state.type.value if state else "PENDING"
        return {
            "id": flow_run_id,
            "name": flow_run.name,
            "state": state.name if state else "Pending",
            "type": kind,
            "message": state.message if state else None,
            "final": kind in FINAL_STATES,
            "url": self.flow_run_url(flow_run_id),
            "progress": latest_progress(log.message for log in logs),
        }

    def log_messages(self, flow_run_id: str) -> list[str]:
        """Every log message of a flow run, oldest first; none when the server does not answer or
        holds no such run."""
        import httpx
        from prefect.exceptions import ObjectNotFound

        if not _is_uuid(flow_run_id):
            return []
        try:
            with self._client() as client:
                return read_all_logs(client, flow_run_id)
        except (httpx.HTTPError, OSError, ObjectNotFound):
            return []


LOG_PAGE = 200  # the most logs the Prefect server returns to one request


def read_all_logs(client, flow_run_id: str) -> list[str]:
    """Every log message of a flow run, oldest first, page by page."""
    from prefect.client.schemas.sorting import LogSort

    messages: list[str] = []
    while True:
        page = client.read_logs(
            log_filter=_run_logs(flow_run_id), limit=LOG_PAGE, offset=len(messages), sort=LogSort.TIMESTAMP_ASC
        )
        messages += [log.message for log in page]
        if len(page) < LOG_PAGE:
            return messages


def latest_progress(messages_newest_first) -> str | None:
    """The newest trainer progress line among a run's log messages (step, loss, lr, eta), or None."""
    for message in messages_newest_first:
        if found := PROGRESS.search(message):
            return found.group(0)
    return None


def _run_logs(flow_run_id: str):
    from uuid import UUID

    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    return LogFilter(flow_run_id=LogFilterFlowRunId(any_=[UUID(flow_run_id)]))


def idle_pool(client, pool: str | None) -> str | None:
    """Why no worker would pick up a run on work pool ``pool`` (none polls it now), or None."""
    if not pool:
        return None
    if any(w.status.value == "ONLINE" for w in client.read_workers_for_work_pool(pool)):
        return None
    return (
        f"no worker is polling work pool {pool!r}; start one with `ragfactory serve --pool {pool}` "
        f"or `prefect worker start --pool {pool}`"
    )


def _is_uuid(text: str) -> bool:
    from uuid import UUID

    try:
        UUID(text)
    except ValueError:
        return False
    return True
