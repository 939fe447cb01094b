"""Shared fixtures: an isolated warehouse root per test, offline model settings, and the one
temporary Prefect API server of the session."""

from __future__ import annotations

import os
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under `pytest -n N` the machine's cores are shared out among the N workers as a build's
# temporary cluster shares them (``flows/runner.py`` ``worker_env``): two workers each spinning a
# torch pool as wide as the machine made the model's calls several times slower than one worker
# alone. Children (a Prefect stack's workers, subprocess builds) inherit the share.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    from ragfactory.flows.runner import worker_env

    os.environ.update(worker_env(_WORKERS))
# The embedded model is converted once into the checkout's pytest cache, never into ~/.cache;
# every warehouse root a test (or a worker it starts) makes links its files from there.
os.environ.setdefault(
    "RAGFACTORY_MODEL_CACHE", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "ragfactory-model-cache")
)
# So is Prefect's migrated database, which every Prefect home a test or a command makes starts from
# (ragfactory/prefect_database.py).
os.environ.setdefault(
    "RAGFACTORY_PREFECT_CACHE", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "ragfactory-prefect-cache")
)


@pytest.fixture
def warehouse(tmp_path, monkeypatch):
    from ragfactory.warehouse.store import Warehouse

    root = tmp_path / "warehouse"
    monkeypatch.setenv("RAGFACTORY_HOME", str(root))
    return Warehouse(root)


@pytest.fixture
def engines():
    """Registers test doubles as engines for one test: ``engines(backend, name=SCRIPTED)``
    returns the name a config's ``backend`` gives (``tests/fakes.py`` ``registered_engine``);
    every one is unregistered when the test ends."""
    from tests.fakes import SCRIPTED, registered_engine

    with ExitStack() as stack:
        yield lambda backend, name=SCRIPTED: stack.enter_context(registered_engine(backend, name))


@pytest.fixture(scope="session")
def embedded_model(request, tmp_path_factory):
    """The embedded SmolLM2 checkpoint, converted once and kept in pytest's cache folder."""
    from ragfactory.tasks.llm.embedded import embedded_model_path

    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("ragfactory-models") if cache else tmp_path_factory.mktemp("models")
    return embedded_model_path(folder)


@pytest.fixture(scope="session")
def tiny_model(embedded_model, tmp_path_factory):
    """A tiny random Llama with the SmolLM2 tokenizer: trains a step in about a second."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(embedded_model)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    """One temporary Prefect API server for every test that runs flows in this process.

    One per session, never one per folder: Prefect's client services (events, logs) bind to the
    first server they meet, so a second harness started while the first lives leaves its flows
    waiting on a client that talks to the other server.
    """
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")  # tasks called alone
    os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(tmp_path_factory.mktemp("prefect-results"))
    with _prefect_harness(tmp_path_factory.mktemp("prefect-home")):
        yield


@contextmanager
def _prefect_harness(home: Path):
    """Prefect's test harness (``prefect.testing.utilities.prefect_test_harness``) on a database
    seeded from the migrated template, as every command's home is: the harness's own makes an
    empty one that its server migrates, 4 s of a 7 s start."""
    import prefect.context
    import prefect.settings as ps
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.server.database.dependencies import temporary_database_interface
    from prefect.testing.utilities import _find_available_port

    from ragfactory.prefect_database import DATABASE, seed_home

    seed_home(home)
    with ExitStack() as stack:
        stack.enter_context(temporary_database_interface())
        url = f"sqlite+aiosqlite:///{home / DATABASE}"
        stack.enter_context(ps.temporary_settings(updates={ps.PREFECT_SERVER_DATABASE_CONNECTION_URL: url}))
        server = SubprocessASGIServer(port=_find_available_port())
        SubprocessASGIServer._instances[None] = server  # as the harness: no second server in a flow
        stack.callback(SubprocessASGIServer._instances.pop, None, None)
        stack.callback(server.stop)
        server.start(timeout=180)
        stack.enter_context(ps.temporary_settings(updates={ps.PREFECT_API_URL: server.api_url}))
        stack.enter_context(prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()))
        yield
        # the logs and events still queued reach the server before it stops (as the harness's
        # drain); outside an event loop each drain_all waits for its workers in place
        APILogWorker.drain_all(at_exit=False)
        EventsWorker.drain_all(at_exit=False)


class S3Server:
    """A real S3-compatible server (moto's server mode) on 127.0.0.1, for the session: ``env``
    is what a client needs (credentials and endpoint), ``bucket`` makes a fresh bucket."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "ragfactory-test",
            "AWS_SECRET_ACCESS_KEY": "ragfactory-test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="ragfactory-test",
            aws_secret_access_key="ragfactory-test",
        )

    def bucket(self, name: str) -> str:
        """A new, empty bucket; its ``s3://`` URI."""
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"


@pytest.fixture(scope="session")
def s3_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The session's S3 server, with this process's AWS settings pointing at it for the test."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    return s3_server


# Markers by cost (registered in pyproject.toml): a test that uses one of these fixtures, itself or
# through another fixture, carries the fixture's markers, so a new test that reaches for a server
# or the model lands in its tier without a mark by hand. Tests that start a process themselves
# carry ``subprocess`` in their module.
COST_OF_FIXTURE = {
    "embedded_model": ("slow",),  # the real SmolLM2 on CPU
    "prefect_api": ("integration",),  # a real Prefect API server
    "s3_server": ("integration",),  # moto's S3 server
    "slow_engine": ("subprocess",),  # tests/faults/conftest.py: an echo server process
    "retrieval_server": ("subprocess",),  # tests/faults/test_examples.py: `ragfactory retrieval serve`
    "server_process": ("subprocess",),  # tests/retrieval/test_server.py: the retrieval server
    "servers": ("subprocess",),  # tests/llm/test_openai_backend.py: echo and flaky servers
    "vllm_run": ("subprocess",),  # tests/llm/test_vllm_backend.py: the vllm venv's script
}


# `make test` runs the suite on two xdist workers (`--dist loadscope`): each scope runs whole on
# one worker, so a module's (or a package's) fixtures are built once. A module is a scope; a package
# whose fixtures outlive a module (tests/e2e: one stack, one nightly build) is one scope. The
# scheduler reads scopes from node ids, so they are computed from paths, not from markers.
PACKAGE_SCOPES = ("tests/e2e/",)


# The scopes that take longest, longest first (seconds summed over their tests in a `make test`
# on two cores, read from `--junitxml`): they start first, so that no worker picks up a five-minute
# scope when the others are about done (xdist's own order, by number of tests, left the one-test
# memory bound and the embedded evaluation for the last minutes of the run).
LONGEST_SCOPES = (
    "tests/flows/test_memory_bounded.py",  # 513 s
    "tests/e2e/",  # 460 s
    "tests/flows/test_evaluate.py",  # 339 s
    "tests/llm/test_vllm_backend.py",  # 233 s
    "tests/search/test_structured_slow.py",  # 175 s
    "tests/llm/test_prefix_reuse.py",  # 8.5 min beside other work, SmolLM2 twice
    "tests/llm/test_kv_buffers.py",  # 3.4 min beside other work, SmolLM2 twice
    "tests/training/test_world_learning.py",  # 170 s alone
    "tests/search/mcts/test_mcts_slow.py",  # 156 s
    "tests/search/apex/test_apex_slow.py",  # 149 s
    "tests/faults/test_run_states.py",  # 123 s
    "tests/training/test_agentic_slow.py",  # 120 s
    "tests/training/test_embedded_training.py",  # 119 s
    "tests/export/test_trainer_clients.py",  # 110 s
    "tests/flows/test_build_distributed.py",  # 109 s
    "tests/search/r3/test_r3_slow.py",  # 108 s
    "tests/flows/test_nightly.py",  # 58 s
    "tests/faults/test_prefect_settings.py",  # 55 s
    "tests/test_cli.py",  # 45 s
)


def xdist_scope(nodeid: str) -> str:
    """The scope of a test: its package when listed in ``PACKAGE_SCOPES``, else its module."""
    return next((p for p in PACKAGE_SCOPES if nodeid.startswith(p)), nodeid.split("::")[0])


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "_longest_first", False):  # once, on the first assignment
                for scope in reversed(LONGEST_SCOPES):
                    if scope in self.workqueue:
                        self.workqueue.move_to_end(scope, last=False)
                self._longest_first = True
            super()._assign_work_unit(node)

    return ByScope(config, log)


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, markers in COST_OF_FIXTURE.items():
            if fixture in item.fixturenames:
                for marker in markers:
                    item.add_marker(marker)
