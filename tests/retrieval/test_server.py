import subprocess
import sys
import time

import httpx
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from ragfactory.serve import free_port
from ragfactory.tasks.retrieval.bm25 import BM25Retriever
from ragfactory.tasks.retrieval.client import HttpRetriever
from ragfactory.tasks.retrieval.server import create_app


@pytest.fixture
def app_client(passages):
    with TestClient(create_app(BM25Retriever.build(passages))) as client:
        yield client


def test_scores_wrap_each_document(app_client):
    reply = app_client.post(
        "/retrieve", json={"queries": ["Krakatoa", "Kasparov chess"], "topk": 1, "return_scores": True}
    )
    assert reply.status_code == 200
    result = reply.json()["result"]
    assert len(result) == 2 and all(len(row) == 1 for row in result)
    first = result[0][0]
    assert set(first) == {"document", "score"} and first["score"] > 0
    assert first["document"] == {
        "id": "p-volcano",
        "contents": '"Krakatoa"\nKrakatoa is a volcano whose 1883 eruption was heard thousands of kilometres away.',
    }


def test_without_scores_the_list_holds_documents(app_client):
    payload = {"queries": ["espresso"], "topk": 2, "return_scores": False}
    reply = app_client.post("/retrieve", json=payload)
    [[document]] = reply.json()["result"]
    assert set(document) == {"id", "contents"} and document["id"] == "p-coffee"


def test_topk_defaults_to_three(app_client):
    reply = app_client.post("/retrieve", json={"queries": ["the river tower Moon chess pasta"]})
    assert len(reply.json()["result"][0]) == 3


def test_empty_query_list_gives_empty_result(app_client):
    assert app_client.post("/retrieve", json={"queries": []}).json() == {"result": []}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"queries": ["x"], "topk": 0}, "topk"),
        ({"queries": ["x"], "topk": 5000}, "topk"),
        ({"queries": "not a list", "topk": 3}, "queries"),
        ({"queries": [1, 2], "topk": 3}, "queries"),
        ({"topk": 3}, "queries"),
    ],
)
def test_bad_requests_are_422_naming_the_field(app_client, payload, field):
    reply = app_client.post("/retrieve", json=payload)
    assert reply.status_code == 422
    assert any(field in err["loc"] for err in reply.json()["detail"])


@pytest.fixture
def server_process(passages, tmp_path):
    """The server as a separate process over a Parquet file, killed at the end."""
    path = tmp_path / "passages.parquet"
    pq.write_table(passages, path)
    port = free_port()
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragfactory.tasks.retrieval.server",
            "--passages",
            str(path),
            "--kind",
            "bm25",
            "--port",
            str(port),
            "--index-root",
            str(tmp_path / "indexes"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, proc, tmp_path / "server.log")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def wait_until_up(url, proc, log_path, limit_s=60.0):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}: {log_path.read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"server not up after {limit_s}s: {log_path.read_text()}")


def test_separate_process_answers_search_r1_request(server_process, tmp_path):
    payload = {"queries": ["Stradivari violin", "Apollo Moon"], "topk": 2, "return_scores": True}
    reply = httpx.post(f"{server_process}/retrieve", json=payload, timeout=10)
    assert reply.status_code == 200
    result = reply.json()["result"]
    assert [row[0]["document"]["id"] for row in result] == ["p-violin", "p-moon"]
    assert result[0][0]["document"]["contents"].startswith('"Stradivarius"\n')
    with HttpRetriever(f"{server_process}/retrieve", timeout_s=10) as remote:
        rows = remote.search(["Stradivari violin", "glacier Patagonia"], k=2)
    assert [(row[0].passage_id, row[0].title) for row in rows] == [
        ("p-violin", "Stradivarius"),
        ("p-glacier", "Perito Moreno"),
    ]
    assert rows[0][0].text.startswith("A Stradivarius is a violin")
    assert any(p.name.startswith("bm25-") for p in (tmp_path / "indexes").iterdir())
