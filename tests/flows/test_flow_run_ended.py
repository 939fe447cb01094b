"""What a shared Prefect server says of a flow run, for runs held on another machine
(``flows.runs.flow_run_ended``), against the session's real Prefect API server."""

from __future__ import annotations

import uuid

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.states import Crashed, Running

from ragfactory.flows.runs import flow_run_ended


@flow
def nightly() -> None:
    pass


def _flow_run(state) -> str:
    with get_client(sync_client=True) as client:
        created = client.create_flow_run(nightly)
        client.set_flow_run_state(created.id, state, force=True)
        return str(created.id)


def test_a_crashed_flow_run_has_ended_and_a_running_one_has_not():
    assert flow_run_ended(_flow_run(Crashed(message="worker lost"))) == "Crashed"
    assert flow_run_ended(_flow_run(Running())) is None


def test_a_flow_run_the_server_does_not_know_or_a_bad_id_cannot_be_judged():
    assert flow_run_ended(str(uuid.UUID(int=7))) is None
    assert flow_run_ended("not-a-uuid") is None
