import math
import socket
import time

import pytest

from ragfactory.serve import free_port
from ragfactory.tasks.retrieval.client import HttpRetriever, parse_item
from ragfactory.tasks.retrieval.types import Hit, RetrievalError
from tests.retrieval.scripted_server import ScriptedServer


def test_retries_through_two_503s():
    with ScriptedServer([503, 503]) as server:
        with HttpRetriever(server.url, max_retries=3, backoff_s=0.01) as remote:
            rows = remote.search(["alpha", "beta"], k=1)
    assert rows == [
        [Hit("alpha", "alpha", "text of alpha", 1.0)],
        [Hit("beta", "beta", "text of beta", 1.0)],
    ]
    assert len(server.requests) == 3
    assert server.requests[-1] == {"path": "/retrieve", "queries": ["alpha", "beta"], "topk": 1, "return_scores": True}


def test_gives_up_after_max_retries_naming_the_url():
    with ScriptedServer([500, 502, 503]) as server:
        expected = rf"{server.url}/retrieve: no answer after 2 attempt\(s\).*HTTP 502"
        with HttpRetriever(server.url, max_retries=1, backoff_s=0.01) as remote:
            with pytest.raises(RetrievalError, match=expected):
                remote.search(["q"], k=1)
    assert len(server.requests) == 2


def test_client_errors_are_not_retried():
    with ScriptedServer([422]) as server:
        with HttpRetriever(server.url, max_retries=3, backoff_s=0.01) as remote:
            with pytest.raises(RetrievalError, match="HTTP 422.*scripted failure"):
                remote.search(["q"], k=1)
    assert len(server.requests) == 1


def test_large_batches_are_split_and_kept_in_order():
    queries = [f"q{i}" for i in range(5)]
    with ScriptedServer() as server, HttpRetriever(server.url, max_batch=2) as remote:
        rows = remote.search(queries, k=1)
    assert [row[0].passage_id for row in rows] == queries
    assert [r["queries"] for r in server.requests] == [["q0", "q1"], ["q2", "q3"], ["q4"]]


def test_nothing_listening_fails_cleanly():
    url = f"http://127.0.0.1:{free_port()}/retrieve"
    start = time.monotonic()
    with HttpRetriever(url, timeout_s=1.0, max_retries=2, backoff_s=0.01) as remote:
        expected = rf"{url}: no answer after 3 attempt\(s\).*ConnectError"
        with pytest.raises(RetrievalError, match=expected):
            remote.search(["q"], k=3)
    assert time.monotonic() - start < 5


def test_silent_server_times_out_cleanly():
    with socket.socket() as silent:  # accepts connections (kernel backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        with HttpRetriever(url, timeout_s=0.3, max_retries=1, backoff_s=0.01) as remote:
            with pytest.raises(RetrievalError, match=r"no answer after 2 attempt\(s\).*Timeout"):
                remote.search(["q"], k=1)
        assert time.monotonic() - start < 3


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"document": {"id": "7", "contents": '"T"\nbody'}, "score": 2.5}, Hit("7", "T", "body", 2.5)),
        ({"id": "8", "contents": '"T"\nline1\nline2'}, Hit("8", "T", "line1\nline2", math.nan)),
        ({"document": {"id": 9, "title": "T", "text": "body"}, "score": 1}, Hit("9", "T", "body", 1.0)),
    ],
)
def test_parse_item_reads_each_document_shape(item, expected):
    hit = parse_item(item)
    assert (hit.passage_id, hit.title, hit.text) == (
        expected.passage_id,
        expected.title,
        expected.text,
    )
    assert hit.score == expected.score or (math.isnan(hit.score) and math.isnan(expected.score))


@pytest.mark.parametrize("url", ["http://host:1", "http://host:1/", "http://host:1/retrieve"])
def test_url_points_at_retrieve(url):
    assert HttpRetriever(url).url == "http://host:1/retrieve"


@pytest.mark.parametrize("options", [{"max_retries": -1}, {"timeout_s": 0}, {"max_batch": 0}])
def test_bad_options_are_refused(options):
    with pytest.raises(ValueError):
        HttpRetriever("http://host:1", **options)
