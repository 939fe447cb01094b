"""Engines from config: the registry by name, role sharing, retries, option checking."""

from __future__ import annotations

import asyncio
import json

import pytest

from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.llm.cache import CallCache
from ragfactory.tasks.llm.config import ENGINE_ENV, LLMConfig, LLMRoleConfig
from ragfactory.tasks.llm.engine import (
    RetryingBackend,
    make_backend,
    make_backends,
    make_batcher,
    shared_backend,
)
from ragfactory.tasks.llm.registry import register_backend, unregister_backend
from ragfactory.tasks.llm.types import Request, RetryPolicy
from tests.fakes import ScriptedBackend


@pytest.fixture
def checkpoint(tmp_path):
    """A local checkpoint folder; the backend only fingerprints it until the first batch."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(b"\0" * 1024)
    return folder


def test_judge_defaults_to_the_policy_backend_object(checkpoint):
    llm = LLMConfig(policy=LLMRoleConfig(model=str(checkpoint), device="cpu"))
    backends = make_backends(llm, cache_dir=None)
    assert backends["judge"] is backends["policy"]
    assert llm.role("judge") == llm.policy


def test_a_different_judge_gets_its_own_backend(checkpoint):
    policy = LLMRoleConfig(model=str(checkpoint), device="cpu")
    llm = LLMConfig(policy=policy, judge=policy.model_copy(update={"dtype": "bfloat16"}))
    backends = make_backends(llm, cache_dir=None)
    assert backends["judge"] is not backends["policy"]
    assert backends["judge"].fingerprint != backends["policy"].fingerprint


def test_transformers_backend_is_lazy_and_takes_settings(checkpoint):
    role = LLMRoleConfig(model=str(checkpoint), device="cpu", max_batch_size=7)
    backend = make_backend(role, cache_dir=None)
    assert isinstance(backend, RetryingBackend)
    assert backend.backend.settings.max_batch_size == 7
    assert backend.backend._model is None  # nothing loaded before the first batch
    assert backend.fingerprint.startswith("transformers/tiny/float32/")


def test_unknown_option_names_the_backend(checkpoint):
    role = LLMRoleConfig(model=str(checkpoint), options={"gpu_memory_utilisation": 0.5})
    with pytest.raises(ValueError, match="gpu_memory_utilisation.*transformers"):
        make_backend(role, cache_dir=None)


def test_unknown_role_is_refused():
    with pytest.raises(ValueError, match="critic"):
        LLMConfig().role("critic")


def test_build_config_has_llm_defaults():
    config = BuildConfig.model_validate({"llm": {"policy": {"backend": "openai", "model": "m"}}})
    assert config.llm.policy.backend == "openai" and config.llm.role("judge").model == "m"
    with pytest.raises(ValueError, match="backend"):
        BuildConfig.model_validate({"llm": {"policy": {"backend": "tgi"}}})


@pytest.mark.parametrize("failures,retries,ok", [(0, 0, True), (2, 2, True), (3, 2, False)])
def test_retrying_backend_retries_then_raises(failures, retries, ok):
    inner, waits = ScriptedBackend(fail_times=failures), []
    backend = RetryingBackend(inner, RetryPolicy(attempts=retries + 1, backoff_s=0.5), waits.append)
    request = Request.chat([{"role": "user", "content": "x"}])
    if ok:
        assert backend.generate_batch([request])[0][0].text.startswith("x|")
    else:
        with pytest.raises(RuntimeError, match="scripted failure 3/3"):
            backend.generate_batch([request])
    assert inner.attempts == min(failures, retries) + 1
    assert waits == [0.5, 1.0][: min(failures, retries)]


def test_retry_delay_is_capped():
    policy = RetryPolicy(backoff_s=1.0, max_backoff_s=5.0)
    assert [policy.delay(k) for k in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_make_batcher_uses_given_backends_and_config():
    backend = ScriptedBackend()
    llm = LLMConfig(max_batch_size=2)
    batcher = make_batcher(llm, CallCache("run"), backends={"policy": backend, "judge": backend})

    async def main():
        requests = [Request.chat([{"role": "user", "content": f"{q}"}]) for q in range(5)]
        jobs = [lambda r=r: batcher.generate(r) for r in requests]
        return await batcher.run_all(jobs, max_in_flight=5)

    asyncio.run(main())
    assert [len(b) for b in backend.batches] == [2, 2, 1]


def test_a_process_builds_one_engine_per_setting(checkpoint):
    """Two shards' batchers with the same engine settings get the same engine; a judge that
    only turns structured generation off still shares the policy's."""
    policy = LLMRoleConfig(model=str(checkpoint), device="cpu", max_batch_size=5)
    first = make_backends(LLMConfig(policy=policy), cache_dir=None)
    second = make_backends(
        LLMConfig(policy=policy, judge=policy.model_copy(update={"structured": False})), cache_dir=None
    )
    assert first["policy"] is second["policy"] is second["judge"]
    # the pooled engine is one scheduler, running the engine's retries itself
    assert type(first["policy"].backend).__name__ == "TransformersBackend"
    assert first["policy"].retry == RetryPolicy(attempts=4, backoff_s=1.0)


def test_a_registered_engine_is_built_from_the_name_in_the_config(engines):
    """The batcher's roles get the engine their config names; a second role naming another gets it."""
    policy, judge = ScriptedBackend(fingerprint="p"), ScriptedBackend(fingerprint="j")
    llm = LLMConfig.model_validate(
        {"policy": {"backend": engines(policy)}, "judge": {"backend": engines(judge, "scripted:judge")}}
    )
    batcher = make_batcher(llm, CallCache("run"))

    async def main():
        await batcher.generate(Request.chat([{"role": "user", "content": "p"}]))
        await batcher.generate(Request.chat([{"role": "user", "content": "j"}], role="judge"))

    asyncio.run(main())
    assert (policy.calls, judge.calls) == (1, 1)


def test_an_unregistered_name_is_an_error_naming_what_is_registered():
    role = LLMRoleConfig(backend="scripted:nowhere")
    with pytest.raises(
        ValueError,
        match=r"unknown LLM backend 'scripted:nowhere'; registered in this process: "
        r"null, openai, transformers, vllm",
    ):
        make_backend(role, cache_dir=None)


def test_names_are_builtin_or_plugged_and_taken_ones_are_refused(engines):
    with pytest.raises(ValueError, match="'tgi' is neither a built-in engine"):
        register_backend("tgi", lambda role, cache_dir: ScriptedBackend())
    engines(ScriptedBackend())
    with pytest.raises(ValueError, match="'scripted:engine' is already registered"):
        register_backend("scripted:engine", lambda role, cache_dir: ScriptedBackend())


def test_a_shared_engine_is_pooled_until_its_name_is_registered_again():
    built = []

    def factory(role, cache_dir):
        built.append(ScriptedBackend(fingerprint=f"v{len(built)}"))
        return built[-1]

    role = LLMRoleConfig(backend="pooled:test")
    register_backend("pooled:test", factory)
    try:
        assert shared_backend(role, None) is shared_backend(role, None) and len(built) == 1
        register_backend("pooled:test", factory, replace=True)
        assert shared_backend(role, None).fingerprint == "v1"
    finally:
        unregister_backend("pooled:test")


def test_the_engine_variable_is_read_when_a_config_is_made(monkeypatch):
    monkeypatch.setenv(ENGINE_ENV, "scripted:from-env")
    assert LLMConfig().policy.backend == "scripted:from-env"
    assert BuildConfig().llm.policy.backend == "scripted:from-env"
