"""What the end-to-end tests share: the stack they start, the nightly build's parameters, the
deployment runner, and Debian's headless Chromium (``conftest.py`` holds the fixtures).

See test_stack.py for what runs where and why (CPU job variables, the far timezone).
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import yaml

from ragfactory.serve import Stack
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse

REPO = Path(__file__).resolve().parents[2]
UPDATE_SCREENSHOTS = "RAGFACTORY_UPDATE_SCREENSHOTS"


def _far_timezone(now: dt.datetime | None = None) -> str:
    """A fixed-offset IANA zone whose local time is about 14:00 now (02:00 is ~12 h away)."""
    now = now or dt.datetime.now(dt.UTC)
    offset = 14 - now.hour
    offset += 24 if offset < -12 else (-24 if offset > 14 else 0)
    return f"Etc/GMT{-offset:+d}"  # POSIX sign: Etc/GMT-3 is three hours ahead of UTC


TIMEZONE = _far_timezone()
RUN_TIMEOUT_S = 1800  # a wait, not a measure: a deployment run on a loaded 2-core machine
CPU_JOB = {"env": {"RAGFACTORY_DEVICE": "cpu", "RAGFACTORY_ENGINE": "transformers"}}


def nightly_parameters() -> dict:
    """The deployed nightly build's parameters (the demo build), DecEx only, under its own name.

    The same questions, retrieval and DecEx settings as ``make demo``, so the same trees: the
    embedded model's kept answers (SFT examples) and pruned siblings (DPO pairs).
    """
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    [deployment] = [d for d in spec["deployments"] if d["name"] == "nightly-build"]
    parameters = copy.deepcopy(deployment["parameters"])
    search = parameters["config"]["search"]
    search["strategies"] = ["decex"]
    search["question_ids"] = {"decex": search["question_ids"]["decex"]}
    parameters["config"]["name"] = "e2e-nightly"
    assert parameters["policy_model"] == "embedded"
    return parameters


TRL = {"max_steps": 1, "per_device_train_batch_size": 1, "max_length": 512}


@dataclass
class Running:
    stack: Stack
    root: Path
    tmp: Path

    def logs(self, chars: int = 4000) -> str:
        """The tail of each worker's log, for failure messages."""
        parts = []
        for pool in self.stack.workers:
            path = self.stack.log(f"worker-{pool}")
            text = path.read_text(errors="replace") if path and path.exists() else ""
            parts.append(f"--- worker {pool} ---\n{text[-chars:]}")
        return "\n".join(parts)


def run_checked(running: Running, name: str, parameters: dict, job_variables: dict | None = None):
    from prefect.deployments import run_deployment

    flow_run = run_deployment(
        name,
        parameters=parameters,
        job_variables=job_variables,
        timeout=RUN_TIMEOUT_S,
        poll_interval=2,
        as_subflow=False,
    )
    assert flow_run.state is not None and flow_run.state.is_completed(), f"{name}: {flow_run.state}\n{running.logs()}"
    return flow_run


def build_run_id(root: Path) -> str:
    rows = query(Warehouse(root), "select run_id, status from runs where flow = 'build'").to_pylist()
    assert len(rows) == 1 and rows[0]["status"] == "completed", rows
    return rows[0]["run_id"]


class Chromium:
    """Debian's headless Chromium through its chromedriver (nothing is downloaded)."""

    def __init__(self, profile: Path):
        self.profile = profile

    def __enter__(self):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        for path in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
            assert Path(path).exists(), f"{path} missing: `make test` installs Debian's chromium"
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={self.profile}",
            "--window-size=1400,1000",
        ):
            options.add_argument(flag)
        self.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        return self.driver

    def __exit__(self, *exc):
        self.driver.quit()
