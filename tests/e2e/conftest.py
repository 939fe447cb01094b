"""The stack every end-to-end module shares: one Prefect server, its workers and deployments,
and the nightly build they all read (started once per test session, for the whole package)."""

from __future__ import annotations

import pytest

from ragfactory.serve import create_pools, deploy, set_timezone, start_stack
from ragfactory.stack_marker import write_marker
from ragfactory.tasks.llm.embedded import EMBEDDED_DIRNAME
from tests.e2e.stack import TIMEZONE, Running, build_run_id, nightly_parameters, run_checked


@pytest.fixture(scope="package")
def running(tmp_path_factory, embedded_model):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    tmp = tmp_path_factory.mktemp("stack")
    root = tmp / "warehouse"
    models = root / "artifacts" / "models"
    models.mkdir(parents=True)
    (models / EMBEDDED_DIRNAME).symlink_to(embedded_model)  # converted once per test session
    extra = {
        "RAGFACTORY_HOME": str(root),
        "RAGFACTORY_RESULT_STORAGE": "",  # the default: beside the warehouse
        "PREFECT_LOCAL_STORAGE_PATH": str(tmp / "prefect-results"),
    }
    stack = start_stack(prefect_home=tmp / "prefect-home", log_dir=tmp / "logs", extra_env=extra)
    try:
        create_pools(stack.env)
        set_timezone(stack.api_url, TIMEZONE)
        deploy(stack.env)
        stack.add_worker("cpu")
        stack.add_worker("gpu")
        write_marker(root, stack.api_url)  # as `ragfactory serve` does once the stack is up
        with temporary_settings(updates={PREFECT_API_URL: stack.api_url}):
            yield Running(stack, root, tmp)
    finally:
        stack.stop()


@pytest.fixture(scope="package")
def first_build(running):
    flow_run = run_checked(running, "build/nightly-build", nightly_parameters())
    return flow_run, build_run_id(running.root)
