"""The OpenAI-compatible backend against real server processes on 127.0.0.1.

Two server processes (``tests/echo_server.py``: the library's server over test doubles) run
for the module: one serving the echo backend behind an API key, one that fails every distinct
request twice (429, then 503) and answers slowly. The slow test serves the embedded SmolLM2
through the library's ``openai_server`` itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ragfactory.serve import free_port
from ragfactory.tasks.llm.openai_backend import (
    OpenAIBackend,
    OpenAIBackendError,
    OpenAIConfig,
    openai_fingerprint,
    split_tokens,
)
from ragfactory.tasks.llm.openai_server import ServerConfig, create_app
from ragfactory.tasks.llm.types import Backend, Grammar, Request
from tests.echo_server import EchoBackend

REPO = Path(__file__).resolve().parents[2]
ECHO_SERVER = "tests.echo_server"
LIBRARY_SERVER = "ragfactory.tasks.llm.openai_server"

KEY_ENV = "RAGFACTORY_TEST_OPENAI_KEY"
SECRET = "sk-test-0123456789abcdef"
SLOW_REPLY_S = 1.0


def _start_server(*args: str, env: dict | None = None, module: str = ECHO_SERVER) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", module, "--port", str(port), *args]
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stderr=subprocess.PIPE, text=True, cwd=REPO)
    return proc, f"http://127.0.0.1:{port}/v1"


def _wait_ready(proc: subprocess.Popen, base_url: str, headers: dict, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            if httpx.get(f"{base_url}/models", headers=headers, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"server at {base_url} not ready after {timeout_s} s")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def servers():
    echo, echo_url = _start_server("--model", "echo", "--api-key-env", KEY_ENV, env={KEY_ENV: SECRET})
    flaky_args = "--model echo --fail-first 2 --fail-status 429,503 --delay-s".split()
    flaky, flaky_url = _start_server(*flaky_args, str(SLOW_REPLY_S))
    try:
        _wait_ready(echo, echo_url, {"Authorization": f"Bearer {SECRET}"}, 60)
        _wait_ready(flaky, flaky_url, {}, 60)
        yield {"echo": echo_url, "flaky": flaky_url}
    finally:
        _stop(echo)
        _stop(flaky)


@pytest.fixture
def echo(servers, monkeypatch) -> OpenAIBackend:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return OpenAIBackend(OpenAIConfig(model="echo", base_url=servers["echo"], api_key_env=KEY_ENV))


def _flaky(servers, **overrides) -> OpenAIBackend:
    config = dict(model="echo", base_url=servers["flaky"], api_key_env="RAGFACTORY_UNSET_KEY")
    return OpenAIBackend(OpenAIConfig(**{**config, "backoff_s": 0.01, **overrides}))


def _ask(text: str, **sampling) -> Request:
    return Request.chat([{"role": "system", "content": "be brief"}, {"role": "user", "content": text}], **sampling)


@pytest.mark.parametrize("n", [1, 3])
def test_generates_n_completions_over_http(echo, n):
    [completions] = echo.generate_batch([_ask("alpha beta gamma", n=n)])
    assert [c.text for c in completions] == ["alpha beta gamma"] + [f"alpha beta gamma [{i}]" for i in range(1, n)]
    assert all(c.finish_reason == "stop" and c.prompt_tokens == 5 for c in completions)
    # The server bills 3 + 4 * (n - 1) tokens; the split keeps that total.
    assert sum(c.completion_tokens for c in completions) == 3 + 4 * (n - 1)
    assert all(c.latency_s > 0 for c in completions)


@pytest.mark.parametrize(
    ("sampling", "text", "finish"),
    [
        ({"stop": ("gamma",)}, "alpha beta ", "stop"),
        ({"stop": ("zzz", " beta")}, "alpha", "stop"),
        ({"max_tokens": 2}, "alpha beta", "length"),
    ],
)
def test_sampling_reaches_the_server(echo, sampling, text, finish):
    [[completion]] = echo.generate_batch([_ask("alpha beta gamma delta", **sampling)])
    assert (completion.text, completion.finish_reason) == (text, finish)


def test_batch_keeps_request_order(echo):
    requests = [_ask(f"question {i}") for i in range(40)]
    results = echo.generate_batch(requests)
    assert [r[0].text for r in results] == [f"question {i}" for i in range(40)]


def test_sync_call_works_from_worker_thread_and_running_loop(echo):
    async def main():
        in_thread = await asyncio.to_thread(echo.generate_batch, [_ask("from a thread")])
        in_loop = echo.generate_batch([_ask("inside a loop")])
        return in_thread[0][0].text, in_loop[0][0].text

    assert asyncio.run(main()) == ("from a thread", "inside a loop")


def test_list_models(echo):
    assert asyncio.run(echo.list_models()) == ["echo"]


def test_wrong_model_fails_at_once(servers, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    backend = OpenAIBackend(OpenAIConfig(model="other", base_url=servers["echo"], api_key_env=KEY_ENV))
    started = time.perf_counter()
    with pytest.raises(OpenAIBackendError, match=r"request 0: HTTP 404: model 'other' does not exist"):
        backend.generate_batch([_ask("a")])
    assert time.perf_counter() - started < 2  # no retries on a 4xx other than 429


def test_bad_request_is_named_in_its_batch(echo):
    with pytest.raises(OpenAIBackendError, match=r"request 2: HTTP 422: .*temperature"):
        echo.generate_batch([_ask("a"), _ask("b"), _ask("c", temperature=-1.0)])


def test_api_key_never_shows(servers, monkeypatch):
    wrong = "sk-wrong-key-that-must-not-leak"
    monkeypatch.setenv(KEY_ENV, wrong)
    backend = OpenAIBackend(OpenAIConfig(model="echo", base_url=servers["echo"], api_key_env=KEY_ENV))
    assert wrong not in repr(backend) and wrong not in str(backend) and "api_key=set" in repr(backend)
    with pytest.raises(OpenAIBackendError) as failure:
        backend.generate_batch([_ask(f"echo {wrong}")])
    assert "HTTP 401" in str(failure.value) and wrong not in str(failure.value)


def test_server_speaks_openai_to_any_client(servers):
    url, auth = f"{servers['echo']}/chat/completions", {"Authorization": f"Bearer {SECRET}"}
    parts = [
        {"type": "text", "text": "part one "},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "two"},
    ]
    body = {
        "model": "echo",
        "messages": [{"role": "user", "content": parts}],
        "stop": "two",
        "user": "ignored",
    }
    assert httpx.post(url, json=body, timeout=5).status_code == 401
    answer = httpx.post(url, json=body, headers=auth, timeout=5).json()
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"] == "part one "
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert httpx.post(url, json={**body, "stream": True}, headers=auth, timeout=5).status_code == 400


class RecordingEcho(EchoBackend):
    """The echo backend, remembering how many requests each engine call carried."""

    def __init__(self):
        self.batch_sizes = []
        self.requests = []

    def generate_batch(self, requests):
        self.batch_sizes.append(len(requests))
        self.requests.extend(requests)
        return super().generate_batch(requests)


def test_server_coalesces_concurrent_requests_into_batches():
    engine = RecordingEcho()
    app = create_app(engine, ServerConfig(model_name="echo", max_batch=8, batch_window_s=0.2))
    backend = OpenAIBackend(OpenAIConfig(model="echo", base_url="http://app/v1"), transport=httpx.ASGITransport(app))
    results = backend.generate_batch([_ask(f"q{i}") for i in range(20)])
    assert [r[0].text for r in results] == [f"q{i}" for i in range(20)]
    assert sum(engine.batch_sizes) == 20 and max(engine.batch_sizes) == 8 and len(engine.batch_sizes) <= 4


def test_retries_429_and_503_then_succeeds(servers):
    backend = _flaky(servers, max_retries=2)
    results = backend.generate_batch([_ask(f"retry me {i}", n=2) for i in range(3)])
    assert [[c.text for c in r] for r in results] == [[f"retry me {i}", f"retry me {i} [1]"] for i in range(3)]


def test_gives_up_after_max_retries(servers):
    backend = _flaky(servers, max_retries=1)
    with pytest.raises(OpenAIBackendError, match=r"gave up after 2 attempts; last: HTTP 503"):
        backend.generate_batch([_ask("give up")])


def test_times_out(servers):
    started = time.perf_counter()
    # The flaky server fails the first two attempts fast; the third, slow answer times out.
    with pytest.raises(OpenAIBackendError, match=r"gave up after 3 attempts; last: ReadTimeout \(timed out\)"):
        _flaky(servers, max_retries=2, timeout_s=SLOW_REPLY_S / 5).generate_batch([_ask("too slow")])
    assert time.perf_counter() - started < SLOW_REPLY_S


def test_connection_errors_are_retried():
    backend = OpenAIBackend(
        OpenAIConfig(
            model="echo",
            base_url=f"http://127.0.0.1:{free_port()}/v1",
            max_retries=2,
            backoff_s=0.01,
        )
    )
    with pytest.raises(
        OpenAIBackendError,
        match=r"gave up after 3 attempts; last: ConnectError \(connection error\)",
    ):
        backend.generate_batch([_ask("nobody listens")])


def test_concurrency_is_bounded():
    """An in-process fake server counts how many requests are in flight at once."""
    in_flight = peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        choice = {"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}
        return httpx.Response(200, json={"choices": [choice], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    config = OpenAIConfig(model="m", base_url="http://fake/v1", max_concurrency=3)
    results = OpenAIBackend(config, transport=httpx.MockTransport(handler)).generate_batch(
        [_ask(str(i)) for i in range(12)]
    )
    assert len(results) == 12 and peak == 3


def test_tops_up_servers_that_ignore_n():
    """llama.cpp returns one choice whatever n is: the rest come from seeds seed + i."""
    seeds = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seeds.append((body["n"], body["seed"]))
        choice = {
            "index": 0,
            "message": {"content": f"seed {body['seed']}"},
            "finish_reason": "stop",
        }
        return httpx.Response(200, json={"choices": [choice], "usage": {"prompt_tokens": 2, "completion_tokens": 2}})

    backend = OpenAIBackend(OpenAIConfig(model="m", base_url="http://fake/v1"), transport=httpx.MockTransport(handler))
    [completions] = backend.generate_batch([_ask("x", n=3, seed=10)])
    assert [c.text for c in completions] == ["seed 10", "seed 11", "seed 12"]
    assert seeds == [(3, 10), (1, 11), (1, 12)]


@pytest.mark.parametrize(
    ("total", "texts", "expected"),
    [
        (10, ["aaaa", "a"], [8, 2]),
        (3, ["ab", "ab", "ab"], [1, 1, 1]),
        (5, ["", ""], [3, 2]),
        (7, ["x", ""], [7, 0]),
    ],
)
def test_split_tokens_keeps_the_total(total, texts, expected):
    assert split_tokens(total, texts) == expected


def test_fingerprint_ignores_the_server_address():
    a = OpenAIBackend(OpenAIConfig(model="m", base_url="http://a/v1"))
    b = OpenAIBackend(OpenAIConfig(model="m", base_url="http://b/v1"))
    assert a.fingerprint == b.fingerprint == openai_fingerprint("m")
    assert openai_fingerprint("m", revision="2") != a.fingerprint != openai_fingerprint("n")
    assert isinstance(a, Backend) and isinstance(EchoBackend(), Backend)


@pytest.mark.parametrize("field", [{"model": ""}, {"max_concurrency": 0}, {"max_retries": -1}])
def test_config_refuses_bad_values(field):
    with pytest.raises(ValueError, match=f"OpenAIConfig.{next(iter(field))}"):
        OpenAIConfig(**{"model": "m", **field})


ANSWER_GRAMMAR = Grammar("answer", 'start: "<answer>" x "</answer>"\nx[max_tokens=8]: /[a-z]+/\n', 26)


def _asgi(engine) -> OpenAIBackend:
    app = create_app(engine, ServerConfig(model_name="echo"))
    return OpenAIBackend(
        OpenAIConfig(model="echo", base_url="http://app/v1", max_retries=0), transport=httpx.ASGITransport(app)
    )


def test_a_grammar_travels_as_structured_outputs_to_the_engine():
    engine = RecordingEcho()
    backend = _asgi(engine)
    [[answer], [free]] = backend.generate_batch([_ask("q", grammar=ANSWER_GRAMMAR), _ask("r")])
    grammars = sorted((r.messages[-1].content, r.sampling.grammar) for r in engine.requests)
    assert grammars == [("q", Grammar("request", ANSWER_GRAMMAR.text)), ("r", None)]
    assert answer.text == "q" and free.text == "r"  # the echo engine ignores grammars


def test_a_grammar_that_does_not_compile_is_refused_with_400():
    broken = Grammar("broken", "start: nowhere\n", 2)
    with pytest.raises(OpenAIBackendError, match=r"HTTP 400: .*does not compile.*unknown name"):
        _asgi(RecordingEcho()).generate_batch([_ask("q", grammar=broken)])


def test_a_server_without_structured_outputs_names_the_switch():
    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["structured_outputs"] == {"grammar": ANSWER_GRAMMAR.text}
        return httpx.Response(400, json={"error": {"message": "Unrecognized request argument"}})

    config = OpenAIConfig(model="m", base_url="http://hosted.example/v1")
    backend = OpenAIBackend(config, transport=httpx.MockTransport(handler))
    with pytest.raises(OpenAIBackendError, match=r"http://hosted.example/v1 .*structured: false"):
        backend.generate_batch([_ask("q", grammar=ANSWER_GRAMMAR)])


# ---- the real embedded model (slow) -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.subprocess
def test_serves_the_embedded_model(embedded_model):
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    proc, base_url = _start_server("--model", str(embedded_model), "--served-name", "smollm2", module=LIBRARY_SERVER)
    try:
        _wait_ready(proc, base_url, {}, 120)
        backend = OpenAIBackend(OpenAIConfig(model="smollm2", base_url=base_url, api_key_env="RAGFACTORY_UNSET_KEY"))
        greedy = _ask("What is the capital of France?", max_tokens=16, stop=("\n",))
        [[served]] = backend.generate_batch([greedy])
        batch = backend.generate_batch(
            [_ask(f"Name {k} colours.", n=2, temperature=0.8, seed=k, max_tokens=12) for k in range(4)]
        )
    finally:
        _stop(proc)
    [[direct]] = TransformersBackend(embedded_model, TransformersSettings(device="cpu")).generate_batch([greedy])
    assert served.text == direct.text and served.text.strip()
    assert (served.prompt_tokens, served.completion_tokens) == (
        direct.prompt_tokens,
        direct.completion_tokens,
    )
    assert [len(r) for r in batch] == [2, 2, 2, 2]
    assert all(0 < c.completion_tokens <= 12 * 2 and c.finish_reason in {"stop", "length"} for r in batch for c in r)


@pytest.mark.slow
@pytest.mark.subprocess
def test_serves_the_embedded_model_held_to_a_grammar(embedded_model):
    """The served model honours structured_outputs: the same text as the backend run directly."""
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings
    from ragfactory.tasks.prompts.loader import load_grammar, render_prompt
    from ragfactory.tasks.search.treeps.steps import parse_step

    grammar = load_grammar("treeps_step", 96)
    prompt = render_prompt("treeps_step", question="Who directed Jaws?")
    request = Request.chat([{"role": "user", "content": prompt}], max_tokens=96, grammar=grammar)
    proc, base_url = _start_server("--model", str(embedded_model), "--served-name", "smollm2", module=LIBRARY_SERVER)
    try:
        _wait_ready(proc, base_url, {}, 120)
        config = OpenAIConfig(model="smollm2", base_url=base_url, api_key_env="RAGFACTORY_UNSET_KEY")
        [[served]] = OpenAIBackend(config).generate_batch([request])
    finally:
        _stop(proc)
    [[direct]] = TransformersBackend(embedded_model, TransformersSettings(device="cpu")).generate_batch([request])
    assert parse_step(served.text, "treeps_step").error is None, served.text
    assert served.text == direct.text
