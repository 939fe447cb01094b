"""A work pool's job variables pick the device and the engine: $RAGFACTORY_DEVICE / _ENGINE."""

from __future__ import annotations

import pytest

from ragfactory.tasks.llm.config import LLMRoleConfig
from ragfactory.tasks.llm.device import default_device
from ragfactory.tasks.training.trainers import cpu_has_bf16, device_settings, vllm_generation, weights_dtype


def test_device_follows_the_environment(monkeypatch):
    monkeypatch.setenv("RAGFACTORY_DEVICE", "cpu")
    assert default_device() == "cpu"
    assert device_settings() == {"use_cpu": True, "bf16": cpu_has_bf16()}
    assert vllm_generation() == {}


def test_cpu_training_autocasts_bf16_where_the_cpu_has_it_over_float32_weights(monkeypatch):
    import torch

    monkeypatch.setenv("RAGFACTORY_DEVICE", "cpu")
    flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "").split()
    assert cpu_has_bf16() == bool({"avx512_bf16", "amx_bf16"} & set(flags))
    assert weights_dtype() is torch.float32


def test_a_bad_or_missing_device_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv("RAGFACTORY_DEVICE", "tpu")
    with pytest.raises(ValueError, match="RAGFACTORY_DEVICE='tpu'"):
        default_device()
    import torch

    if not torch.cuda.is_available():
        monkeypatch.setenv("RAGFACTORY_DEVICE", "cuda")
        with pytest.raises(RuntimeError, match="no usable CUDA"):
            default_device()


def test_engine_default_follows_the_environment_and_a_config_wins(monkeypatch):
    monkeypatch.setenv("RAGFACTORY_ENGINE", "vllm")
    assert LLMRoleConfig().backend == "vllm"
    assert LLMRoleConfig(backend="transformers").backend == "transformers"
    monkeypatch.setenv("RAGFACTORY_ENGINE", "bogus")
    with pytest.raises(ValueError, match="backend"):
        LLMRoleConfig()
    monkeypatch.delenv("RAGFACTORY_ENGINE")
    assert LLMRoleConfig().backend == "transformers"


def test_an_engine_computes_on_half_the_cores_unless_told_and_leaves_torch_as_it_was():
    import torch

    from ragfactory.tasks.llm.device import cpu_threads, engine_threads

    assert (engine_threads(available=5), engine_threads(3, available=5), engine_threads(available=1)) == (2, 3, 1)
    before = torch.get_num_threads()
    with cpu_threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before
