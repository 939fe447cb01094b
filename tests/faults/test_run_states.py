"""Fault injection: run states tell the truth (``warehouse/runs.py``).

Real `ragfactory build` processes, each in its own root. The engine is the OpenAI-compatible
echo server (``tests/echo_server.py --model echo``: the library's server over a test double)
behind the config's ``openai`` backend, slowed with ``--delay-s`` so a signal lands while a
shard waits on an engine call: the build is known to be mid-shard when it holds an open
connection to the server. (A scripted engine registered in this process could not serve here:
the build runs in another process, which never sees this one's registry.)

- SIGTERM / SIGINT mid-shard: exit 143 / 130 within ``EXIT_WITHIN_S`` of the signal, one line
  naming the signal and the run, ``runs.status = 'interrupted'``, no process the build started
  alive afterwards (checked by pid), its temporary PREFECT_HOME removed. The same for SIGTERM
  during `ragfactory evaluate` with the embedded model (slow: it loads the model) and during
  `ragfactory train` (a tiny model's SFT, set to run far longer than the test).
- A ``running`` row whose process died (SIGKILL) reads ``abandoned`` after ``ragfactory tables``.
- A partial build ends in a Failed Prefect state, not Completed, and still prints its summary.
- Two builds started at once, each with its own root, both succeed (each has its own Prefect
  home, so they never migrate one database together).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ragfactory.cli import app
from ragfactory.warehouse.runs import holding_run, mark_abandoned_runs, now
from ragfactory.warehouse.store import Warehouse
from tests.faults.processes import (
    START_WITHIN_S,
    alive_pids,
    build_config,
    sigterm_once_recorded,
    start_build,
    start_cli,
    start_mid_shard_build,
)

EXIT_WITHIN_S = 30  # from the signal to the build's exit, the Prefect server stopped included


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_shard_records_interrupted_and_leaves_no_process(tmp_path, slow_engine, signum, code):
    build, root, log = start_mid_shard_build(tmp_path, slow_engine)
    try:
        children = psutil.Process(build.pid).children(recursive=True)
        assert children, "the build should have started Prefect's temporary server"
        prefect_home = Path(children[0].environ()["PREFECT_HOME"])
        assert prefect_home.is_dir()
        sent = time.monotonic()
        build.send_signal(signum)
        assert build.wait(timeout=EXIT_WITHIN_S) == code
        assert time.monotonic() - sent <= EXIT_WITHIN_S
    finally:
        if build.poll() is None:
            build.kill()
    name = signal.Signals(signum).name
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert lines[-1].startswith(f"error: interrupted by {name}: run faults-"), lines[-5:]
    assert "recorded as interrupted" in lines[-1]
    assert [line for line in lines if "interrupted by" in line] == [lines[-1]]
    deadline = time.monotonic() + 5
    while alive_pids([c.pid for c in children]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive_pids([c.pid for c in children]) == [], "a process the build started outlived it"
    assert not prefect_home.exists()
    [run] = Warehouse(root).read("runs").to_pylist()
    assert (run["status"], run["error"]) == ("interrupted", f"interrupted by {name}")
    assert run["finished_at"] is not None


HOLD = textwrap.dedent("""
    import sys, time
    from ragfactory.warehouse.runs import holding_run, now
    from ragfactory.warehouse.store import Warehouse
    with holding_run(Warehouse(sys.argv[1]), run_id="held", flow="build", config={}, config_hash="x",
                     started_at=now()):
        print("held", flush=True)
        time.sleep(120)
""")


@pytest.mark.subprocess
def test_a_running_row_whose_process_died_reads_abandoned(tmp_path):
    root = tmp_path / "wh"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert mark_abandoned_runs(Warehouse(root)) == []  # a live process holds it
        assert Warehouse(root).read("runs").to_pylist()[0]["status"] == "running"
        holder.kill()  # SIGKILL: no handler runs, the row still says running
        holder.wait(timeout=10)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert Warehouse(root).read("runs").to_pylist()[0]["status"] == "running"
    result = CliRunner().invoke(app, ["tables", "--root", str(root)])
    assert result.exit_code == 0, result.output
    [run] = Warehouse(root).read("runs").to_pylist()
    assert run["status"] == "abandoned" and run["finished_at"] is not None
    assert run["error"].startswith(f"abandoned: no live process holds it (last holder pid {holder.pid} on ")


def test_a_run_held_in_this_process_is_not_abandoned_and_a_second_holder_is_refused(warehouse):
    from ragfactory.warehouse.runlock import RunBusy

    run = dict(run_id="mine", flow="build", config={}, config_hash="x", started_at=now())
    with holding_run(warehouse, **run) as hold:
        assert mark_abandoned_runs(warehouse) == []
        with pytest.raises(RunBusy, match=f"run mine is running in pid {os.getpid()} on "):
            with holding_run(warehouse, wait_s=0.2, **run):
                pass
        hold.record("completed")
    assert mark_abandoned_runs(warehouse) == []
    assert warehouse.read("runs").to_pylist()[0]["status"] == "completed"


def test_an_error_in_a_held_run_records_failed_naming_it(warehouse):
    run = dict(run_id="broken", flow="build", config={}, config_hash="x", started_at=now())
    with pytest.raises(OSError):
        with holding_run(warehouse, **run):
            raise OSError("disk full\nmore detail")
    [row] = warehouse.read("runs").to_pylist()
    assert (row["status"], row["error"]) == ("failed", "OSError: disk full")


@pytest.mark.subprocess
def test_a_partial_build_is_a_failed_prefect_state_and_prints_its_summary(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text("this is not json\n")
    config = build_config(
        tmp_path,
        datasets=[{"name": "bamboogle", "limit": 2}, {"name": "custom", "format": "flashrag", "path": str(broken)}],
    )
    log = tmp_path / "build.log"
    build = start_build(config, tmp_path / "wh", log)
    assert build.wait(timeout=START_WITHIN_S + 120) == 1
    output = log.read_text()
    assert "Finished in state Partial('run faults-" in output and "type=FAILED" in output
    assert "Finished in state Completed" not in output.split("Flow run")[-1]
    assert "status: partial" in output and "failed shards: custom" in output


@pytest.mark.subprocess
def test_two_builds_started_at_once_both_succeed(tmp_path):
    builds = []
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        builds.append((folder / "build.log", start_build(build_config(folder), folder / "wh", folder / "build.log")))
    for log, build in builds:
        assert build.wait(timeout=START_WITHIN_S + 120) == 0, log.read_text()[-2000:]
        output = log.read_text()
        assert "status: completed" in output and "OperationalError" not in output


def test_each_command_gets_its_own_prefect_home_unless_an_api_is_configured(tmp_path, monkeypatch):
    from ragfactory.local_flows import prefect_local_defaults

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "user-home"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_PROFILES_PATH", raising=False)
    cleanup = prefect_local_defaults()
    first = Path(os.environ["PREFECT_HOME"])
    assert first != tmp_path / "user-home" and first.is_dir()
    cleanup()
    assert not first.exists()
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "user-home"))
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    prefect_local_defaults()
    assert os.environ["PREFECT_HOME"] == str(tmp_path / "user-home")


@pytest.mark.slow
@pytest.mark.subprocess
def test_sigterm_during_an_evaluation_records_interrupted_and_leaves_no_process(tmp_path):
    root, log = tmp_path / "wh", tmp_path / "evaluate.log"
    evaluation = start_cli(
        [
            "evaluate",
            "--model",
            "embedded",
            "-d",
            "hotpotqa",
            "--limit",
            "20",
            "--mode",
            "agentic",
            "--root",
            str(root),
        ],
        log,
        {"RAGFACTORY_ENGINE": "transformers"},
    )
    children = sigterm_once_recorded(evaluation, root, log, EXIT_WITHIN_S)
    _assert_recorded_interrupted(root, log, children, "eval-")


@pytest.mark.slow
@pytest.mark.subprocess
def test_sigterm_during_a_training_records_interrupted_and_leaves_no_process(tmp_path, tiny_model):
    root, log, export = tmp_path / "wh", tmp_path / "train.log", tmp_path / "sft.parquet"
    conversations = [
        [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}] for i in range(8)
    ]
    pq.write_table(pa.table({"messages": conversations}), export)
    training = start_cli(
        ["train", "--method", "sft", "--parquet", str(export), "--base-model", tiny_model]
        + ["--trl", "max_steps=100000", "--root", str(root)],
        log,
    )
    children = sigterm_once_recorded(training, root, log, EXIT_WITHIN_S)
    _assert_recorded_interrupted(root, log, children, "train-sft-")


def _assert_recorded_interrupted(root: Path, log: Path, children: list, run_prefix: str) -> None:
    """The command's last line says SIGTERM interrupted run ``run_prefix...``, no process it
    started lives on, and its one ``runs`` row says interrupted."""
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert lines[-1].startswith(f"error: interrupted by SIGTERM: run {run_prefix}"), lines[-5:]
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]]
    time.sleep(1)
    assert alive_pids([c.pid for c in children]) == []
    [run] = Warehouse(root).read("runs").to_pylist()
    assert (run["status"], run["error"]) == ("interrupted", "interrupted by SIGTERM")
