"""A command on a warehouse that a running ``ragfactory serve`` serves reports to its server
(``ragfactory/stack_marker.py``); a stale or silent marker is ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ragfactory.local_flows import report_to_serving_stack
from ragfactory.stack_marker import MARKER, remove_marker, running_stack_api, write_marker


class Health(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the handler's name is http.server's)
        self.send_response(200 if self.path == "/api/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def api():
    server = HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/api"
    server.shutdown()


def test_a_live_marker_names_its_server_and_is_removed_by_its_writer(tmp_path, api):
    path = write_marker(tmp_path, api)
    assert json.loads(path.read_text()) == {"api_url": api, "pid": os.getpid()}
    assert running_stack_api(tmp_path) == api
    remove_marker(tmp_path)
    assert not (tmp_path / MARKER).exists() and running_stack_api(tmp_path) is None


def test_a_dead_writer_or_a_silent_server_is_ignored(tmp_path, api):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / MARKER).write_text(json.dumps({"api_url": api, "pid": int(gone.stdout)}))
    assert running_stack_api(tmp_path) is None  # serve was killed: its marker stays behind
    write_marker(tmp_path, "http://127.0.0.1:9/api")  # alive, but nothing listens
    assert running_stack_api(tmp_path, timeout=0.5) is None
    (tmp_path / MARKER).write_text("{not json")
    assert running_stack_api(tmp_path) is None


def test_a_command_on_a_served_warehouse_reports_to_its_server(tmp_path, api, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(tmp_path / "no-profiles.toml"))
    write_marker(tmp_path / "served", api)
    assert report_to_serving_stack(tmp_path / "another") is None  # not served: the temporary server
    assert "PREFECT_API_URL" not in os.environ
    assert report_to_serving_stack(tmp_path / "served") == api
    assert os.environ["PREFECT_API_URL"] == api
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")  # a configured API wins
    assert report_to_serving_stack(tmp_path / "served") is None
    assert os.environ["PREFECT_API_URL"] == "http://127.0.0.1:1/api"
