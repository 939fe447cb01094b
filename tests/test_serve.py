"""The local stack's process handling, with plain child processes instead of Prefect.

tests/e2e/test_stack.py runs the real server and workers; these check the parts that must hold
whatever Prefect does: a stopped child takes its own children with it, one that ignores
SIGTERM is killed, and a server that dies while starting is reported at once.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from ragfactory import process_groups, serve
from ragfactory.cli import app


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waits only for its parent to reap it
        return stat.read().split(")")[-1].split()[0] != "Z"


def _spawn_with_grandchild(tmp_path, trap: str = "") -> tuple[subprocess.Popen, int]:
    pid_file = tmp_path / "grandchild.pid"
    script = f"{trap} sleep 300 & echo $! > {pid_file}; wait"
    process = process_groups.spawn(["sh", "-c", script], dict(os.environ), None, cwd=tmp_path)
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return process, int(pid_file.read_text())


def test_stop_ends_the_child_and_its_children(tmp_path):
    process, grandchild = _spawn_with_grandchild(tmp_path)
    assert _alive(grandchild)
    code = process_groups.stop(process, grace=10)
    assert code is not None and process.poll() is not None
    time.sleep(0.2)
    assert not _alive(grandchild)


def test_stop_kills_what_ignores_sigterm(tmp_path):
    process, grandchild = _spawn_with_grandchild(tmp_path, trap="trap '' TERM;")
    started = time.monotonic()
    assert process_groups.stop(process, grace=1) == -9
    assert time.monotonic() - started < 10
    time.sleep(0.2)
    assert not _alive(grandchild)


def test_wait_healthy_reports_a_server_that_exited():
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(serve.StackError, match="exited with code 3"):
        serve.wait_healthy(f"http://127.0.0.1:{serve.free_port()}/api", process, timeout=30)


def test_wait_healthy_gives_up_after_its_timeout():
    with pytest.raises(serve.StackError, match="not healthy"):
        serve.wait_healthy(f"http://127.0.0.1:{serve.free_port()}/api", None, timeout=1)


def test_free_port_is_bindable():
    port = serve.free_port()
    assert serve.port_is_free(port)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        assert not serve.port_is_free(port)


def test_a_port_left_in_time_wait_by_a_stopped_server_is_free_and_a_listening_one_is_not():
    """What a Ctrl-C leaves: the server closed its accepted connection first, so that connection
    lingers in TIME_WAIT on the server's port for a minute after the server is gone."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert not serve.port_is_free(port)  # listening: in use
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end goes to TIME_WAIT
        client.recv(1)
        client.close()
    with socket.socket() as plain:  # a bind without SO_REUSEADDR fails there, as the old probe did
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    assert serve.port_is_free(port)


def test_serve_refuses_a_busy_port_before_starting_anything(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(serve.StackError, match="in use"):
            serve.serve(port=sock.getsockname()[1], prefect_home=tmp_path, echo=lambda *_: None)
    assert not any(tmp_path.iterdir())


def test_children_talk_to_the_stack_and_never_prompt(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "https://api.prefect.cloud/somewhere")
    env = serve.stack_env("http://127.0.0.1:4321/api", tmp_path, {"RAGFACTORY_HOME": "/data"})
    assert env["PREFECT_API_URL"] == "http://127.0.0.1:4321/api"
    assert env["PREFECT_HOME"] == str(tmp_path) and env["RAGFACTORY_HOME"] == "/data"
    assert env["PREFECT_CLI_PROMPT"] == "false" and env["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"


@pytest.mark.subprocess
def test_a_failing_cli_step_shows_its_output(tmp_path):
    env = serve.stack_env(f"http://127.0.0.1:{serve.free_port()}/api", tmp_path)
    with pytest.raises(serve.StackError, match="no-such-command"):
        serve.run_cli(["no-such-command"], env, timeout=120)


def test_serve_refuses_an_unknown_pool():
    result = CliRunner().invoke(app, ["serve", "--pool", "tpu"])
    assert result.exit_code == 1 and "tpu" in result.output and "cpu" in result.output


def test_serve_refuses_a_busy_dashboard_port_before_starting_anything(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        with pytest.raises(serve.StackError, match=f"127.0.0.1:{busy} is in use; pick another with --dashboard-port"):
            serve.serve(port=serve.free_port(), prefect_home=tmp_path, echo=lambda *_: None, dashboard_port=busy)
    assert not any(tmp_path.iterdir())


def test_serve_starts_a_worker_for_every_pool_the_deployments_use_and_maps_gpu_without_cuda():
    from ragfactory.serve import deployment_pools, pool_env

    assert deployment_pools() == ["cpu", "gpu"]  # prefect.yaml: nightly-build and evaluate on cpu, train-* on gpu
    assert pool_env("gpu", cuda=False) == {"RAGFACTORY_LOCAL_DEVICE": "cpu"}
    assert pool_env("gpu", cuda=True) == {} and pool_env("cpu", cuda=False) == {}


def test_a_worker_that_maps_cuda_to_its_cpu_runs_a_cuda_job_there(monkeypatch):
    import torch

    from ragfactory.tasks.llm.config import default_engine
    from ragfactory.tasks.llm.device import default_device

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: nothing to map")
    monkeypatch.setenv("RAGFACTORY_DEVICE", "cuda")
    monkeypatch.setenv("RAGFACTORY_ENGINE", "vllm")
    with pytest.raises(RuntimeError, match="no usable CUDA device"):
        default_device()
    assert default_engine() == "vllm"
    monkeypatch.setenv("RAGFACTORY_LOCAL_DEVICE", "cpu")
    assert (default_device(), default_engine()) == ("cpu", "transformers")
