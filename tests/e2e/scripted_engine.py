"""A scripted DecEx policy behind the OpenAI-compatible server, for the end-to-end build.

The embedded SmolLM2-135M almost never writes DecEx-RAG's tags (its termination votes and
answers are format errors), so a build with it exports no SFT example to train on. The e2e
nightly build therefore generates through the real ``openai`` backend against this server,
which answers in the papers' formats: the gold answer on one branch, a wrong one on the other,
so the trees have kept answers (SFT examples) and pruned siblings (DPO pairs). Training then
runs the embedded model on that export, on CPU.

The server runs in a thread of the test process, so the test counts the engine calls the
workers' flow runs made.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from ragfactory.serve import free_port
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.llm.openai_server import ServerConfig, create_app
from tests.fakes import ScriptedBackend
from tests.flows.scripted_policies import decex_policy

MODEL_NAME = "scripted-decex"


@contextmanager
def scripted_engine(dataset: str = "hotpotqa", limit: int = 10) -> Iterator[tuple[str, ScriptedBackend]]:
    """Serve the scripted policy on a free port; yields (base_url, backend)."""
    import uvicorn

    golden = {q["question"]: q["golden_answers"][0] for q in load_bundled(dataset, limit=limit).questions}
    backend = ScriptedBackend(decex_policy(golden), fingerprint=MODEL_NAME)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(backend, ServerConfig(model_name=MODEL_NAME)),
                                          host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert httpx.get(f"{base_url}/models", timeout=5).status_code == 200
    try:
        yield base_url, backend
    finally:
        server.should_exit = True
        thread.join(timeout=10)
