"""Preflight: check a whole build or evaluation config before any work, on this machine only.

Every input path must be a file, and every model must resolve locally: 'embedded', a local
folder, a model registered in the warehouse's ``models`` table (its id, or ``latest:NAME``), or
a name already in the local Hugging Face cache. Nothing here touches the network, so an unknown
model fails in a second with a message naming it, instead of after minutes of hub retries. All
problems are gathered and raised together as one :class:`PreflightError` (permanent: never
retried), so a config with three mistakes is fixed in one round.

:func:`apply_network_policy` is the other half: unless the config allows downloads, the
process runs with ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1``, so no later stage can
reach a hub either. Plain Python (no Prefect): the CLI calls it before a flow starts and each
flow again as its first step.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pyarrow.parquet as pq

from ragfactory.flows.config import BuildConfig, EvalConfig, TrainConfig
from ragfactory.schemas.errors import PermanentError
from ragfactory.tasks.data.config import DatasetConfig
from ragfactory.tasks.data.loaders import bundled_names
from ragfactory.tasks.llm.config import LLMConfig, LLMRoleConfig
from ragfactory.tasks.llm.embedded import is_embedded
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.tasks.training.registry import LATEST, PROMOTED, find_model, latest_model, promoted_model
from ragfactory.tasks.training.trackers import missing_packages, requested_trackers
from ragfactory.warehouse.store import Warehouse, folder_name_problem, safe_name

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
ACCEPTED_MODELS = (
    "'embedded', a local folder, a model id or latest:NAME from the models table, "
    "or a model already in the local Hugging Face cache"
)
LOCAL_ENGINES = ("transformers", "vllm", "null")  # engines that load a model (or its tokenizer) from this machine


class PreflightError(PermanentError, LookupError, ValueError):
    """A config that cannot run here; the message lists every problem, each naming its field."""


def apply_network_policy(allow_downloads: bool) -> None:
    """Run this process offline (no model hub) unless ``allow_downloads``.

    Sets the environment for libraries imported later and the flag of a ``huggingface_hub``
    already imported (it reads the environment once, at import). With ``allow_downloads`` the
    environment is left as the user set it.
    """
    if allow_downloads:
        return
    for name in OFFLINE_VARIABLES:
        os.environ[name] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True


def preload_problems(modules: list[str]) -> list[str]:
    """Import ``runner.preload`` here, as the workers will, so that the engines and retrievers
    they register are known to the checks that follow; one problem per module that fails."""
    problems = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            problems.append(f"runner.preload: cannot import {module!r}: {exc}")
    return problems


def check_build(config: BuildConfig, wh: Warehouse, policy_model: str | None = None) -> None:
    """Raise :class:`PreflightError` naming every input file that is missing and every model
    that does not resolve locally (``policy_model`` overrides the config's policy model)."""
    problems = [p for i, d in enumerate(config.datasets) if (p := dataset_problem(f"datasets[{i}]", d))]
    problems += [p for i, f in enumerate(config.corpus.files) if (p := path_problem(f"corpus.files[{i}]", f))]
    problems += source_problems(config)
    problems += [
        p
        for i, d in enumerate(config.export.decontamination.eval_files)
        if (p := dataset_problem(f"export.decontamination.eval_files[{i}]", d))
    ]
    roles = {"llm.policy.model": config.llm.policy}
    if config.llm.judge is not None:
        roles["llm.judge.model"] = config.llm.judge
    for field, role in roles.items():
        spec = policy_model if policy_model and field == "llm.policy.model" else role.model
        problems += _role_problems(field, role, spec, wh, config.allow_downloads)
    problems += preload_problems(config.runner.preload)
    problems += engine_problems(config.llm)
    encoders = {}
    if config.retrieval.dense.enabled:
        encoders["retrieval.dense.model"] = config.retrieval.dense.model
    if config.export.decontamination.embedding and config.search.strategies:
        encoders["export.decontamination.embedder"] = config.export.decontamination.embedder
    for name in config.search.strategies:
        plugin = STRATEGIES.get(name)
        for field, model in plugin.encoders(plugin.settings(config.search)).items():
            encoders[f"search.{name}.{field}"] = model
    problems += [p for field, name in encoders.items() if (p := encoder_problem(field, name, config.allow_downloads))]
    _raise(problems)


def source_problems(config: BuildConfig) -> list[str]:
    """Corpus files that would land in one passage source (``passages.source``: a file's name
    without its folder and extension, or a dataset's name): their passages would merge, and one
    file's could replace the other's, without a word."""
    problems, owners = [], {d.name: f"datasets {d.name!r}" for d in config.datasets}
    for i, file in enumerate(config.corpus.files):
        source = safe_name(Path(file).stem)
        if source in owners:
            problems.append(
                f"corpus.files[{i}]: {file} would be passage source {source!r}, as {owners[source]} is; "
                "rename the file so that each corpus file and dataset is its own source"
            )
        owners.setdefault(source, f"corpus.files {file}")
    return problems


def check_evaluation(config: EvalConfig, wh: Warehouse) -> None:
    """Raise :class:`PreflightError` when the evaluated or the compared model does not resolve."""
    problems = _role_problems("model", config.llm.policy, config.model, wh, config.allow_downloads)
    if config.compare:
        problems += _role_problems("compare", config.llm.policy, config.compare, wh, config.allow_downloads)
    problems += engine_problems(config.llm)
    problems += [p for i, name in enumerate(config.datasets) if (p := eval_dataset_problem(f"datasets[{i}]", name, wh))]
    if config.retrieval.dense.enabled and config.retrieval.default == "dense":
        problems += [
            p
            for p in [encoder_problem("retrieval.dense.model", config.retrieval.dense.model, config.allow_downloads)]
            if p
        ]
    _raise(problems)


def check_training(config: TrainConfig, wh: Warehouse) -> None:
    """Raise :class:`PreflightError` when the base model does not resolve, ``parquet`` is missing or a
    requested tracker's package is not installed."""
    problems = [p for p in [model_problem("base_model", config.base_model, wh, config.allow_downloads)] if p]
    if config.parquet and not Path(config.parquet).expanduser().exists():
        problems.append(f"parquet: {config.parquet} does not exist; give an export file or folder, or run_id")
    refused = run_id_problems(config)
    if config.run_id is not None and not refused:
        problems += [p for p in [export_problem(config, wh)] if p]
    problems += refused + [p for p in [missing_packages(requested_trackers(config.options))] if p]
    _raise(problems)


def run_id_problems(config: TrainConfig) -> list[str]:
    """The build run ids a training names that no ``run_id=<id>`` folder holds as written: such
    a folder is looked up by its path-safe name (``safe_name``), another build's."""
    named = {"run_id": config.run_id} | {f"more_run_ids[{i}]": r for i, r in enumerate(config.more_run_ids)}
    found = {field: folder_name_problem(r, "run_id", "a run id") for field, r in named.items() if r is not None}
    return [f"{field}: {problem}" for field, problem in found.items() if problem]


def export_problem(config: TrainConfig, wh: Warehouse) -> str | None:
    """Why run ``config.run_id`` has nothing to train ``config.method`` on, or None: no rows in its
    export table for the method, said as "no such run" when the warehouse has no run of that id.
    Rows written under a run id without a ``runs`` row (an export copied in, a test's fixture)
    train as they are."""
    table = config.export_table
    if sum(pq.read_metadata(f).num_rows for f in wh.files(table, run_id=config.run_id)):
        return None  # rows to train on, whichever way they were written
    if not wh.read("runs", run_id=config.run_id).num_rows:
        return (
            f"run_id: no run {config.run_id!r} in {wh.root}; list the builds with "
            "`ragfactory sql \"select run_id, status from runs where flow = 'build'\"`"
        )
    return (
        f"run_id: run {config.run_id!r} exported no {table} rows, which --method {config.method} "
        "trains on; build with a strategy that exports them, or give --parquet"
    )


def eval_dataset_problem(field: str, name: str, wh: Warehouse) -> str | None:
    """Why an evaluation cannot read dataset ``name``: neither bundled (ingested on demand) nor
    ingested into the warehouse by a build; None when it can."""
    if name in bundled_names() or wh.files("questions", dataset=name):
        return None
    return (
        f"{field}: no questions of {name!r} in {wh.root}: build them first (`ragfactory build`), or name a "
        f"bundled dataset: {', '.join(bundled_names())}"
    )


def _raise(problems: list[str]) -> None:
    if problems:
        raise PreflightError("; ".join(problems))


def dataset_problem(field: str, dataset: DatasetConfig) -> str | None:
    """Why a configured dataset file cannot be read, or None."""
    if dataset.path == "bundled":
        if dataset.name in bundled_names():
            return None
        return (
            f"{field}: no bundled dataset {dataset.name!r}; bundled: {', '.join(bundled_names())}, "
            "or give `path` to a JSONL file"
        )
    return path_problem(f"{field}.path", dataset.path)


def path_problem(field: str, path: str) -> str | None:
    """Why ``path`` is not a readable file, or None."""
    resolved = Path(path).expanduser()
    if not resolved.exists():
        return f"{field}: {path} does not exist; fix the path (a relative path is read from {Path.cwd()})"
    if not resolved.is_file():
        return f"{field}: {path} is not a file (a JSONL file is expected)"
    if not os.access(resolved, os.R_OK):
        return f"{field}: {path} is not readable by this user"
    return None


def engine_problems(llm: LLMConfig) -> list[str]:
    """Why a role's ``backend`` names no engine registered in this process (``tasks/llm/registry.py``)."""
    from ragfactory.tasks.llm import engine  # noqa: F401  (the built-in engines register on import)
    from ragfactory.tasks.llm.registry import registered_backends

    known = registered_backends()
    roles = {"policy": llm.policy, **({"judge": llm.judge} if llm.judge is not None else {})}
    return [
        f"llm.{name}.backend: no engine {role.backend!r} is registered in this process; registered: "
        f"{', '.join(known)} (a plugged engine registers in every process that runs the flow)"
        for name, role in roles.items()
        if role.backend not in known
    ]


def _role_problems(field: str, role: LLMRoleConfig, spec: str, wh: Warehouse, allow_downloads: bool) -> list[str]:
    if role.backend not in LOCAL_ENGINES:  # a served or plugged engine's model: only that engine knows it
        return []
    problem = model_problem(field, spec, wh, allow_downloads)
    return [problem] if problem else []


def model_problem(field: str, spec: str, wh: Warehouse, allow_downloads: bool = False) -> str | None:
    """Why an LLM model spec does not resolve on this machine, or None; reads no network."""
    spec = spec.strip()
    if is_embedded(spec):
        return None
    if spec == PROMOTED:
        named = promoted_model(wh)
        if named is None:
            return f"{field}: no model promoted in {wh.root} yet (the nightly pipeline's promotions table is empty)"
        return model_problem(field, named, wh, allow_downloads)
    if spec.startswith(LATEST):
        if latest_model(wh, spec[len(LATEST) :]) is not None:
            return None
        return (
            f"{field}: no trained model of lineage {spec[len(LATEST) :]!r} with weights on disk in "
            f"{wh.root} (train one with `ragfactory train`, or name another model)"
        )
    if not spec or Path(spec).expanduser().exists() or find_model(wh, spec) is not None:
        return None  # an empty name is the config's own error
    if wh.read("models", model_id=spec).num_rows:
        return f"{field}: model {spec!r} is registered in {wh.root} but its weights are not on disk"
    if in_hf_cache(spec) or allow_downloads:
        return None
    return (
        f"{field}: unknown model {spec!r}: not {ACCEPTED_MODELS} ({hf_cache_dir()}); "
        "fix the name, or allow downloads (allow_downloads: true, or --allow-downloads) to fetch it from the hub"
    )


def encoder_problem(field: str, name: str, allow_downloads: bool = False) -> str | None:
    """Why a sentence-transformers model does not resolve locally, or None."""
    from ragfactory.tasks.retrieval.dense import BUNDLED_ALIASES  # faiss: only when asked

    if name in BUNDLED_ALIASES or Path(name).expanduser().exists() or allow_downloads:
        return None
    if in_hf_cache(name) or ("/" not in name and in_hf_cache(f"sentence-transformers/{name}")):
        return None
    return (
        f"{field}: unknown sentence-transformers model {name!r}: not the bundled all-MiniLM-L6-v2, "
        f"a local folder, nor a model in the local Hugging Face cache ({hf_cache_dir()})"
    )


def hf_cache_dir() -> Path:
    """The local Hugging Face hub cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ...)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def in_hf_cache(repo_id: str) -> bool:
    """Whether a model ``org/name`` has a downloaded snapshot in the local Hugging Face cache."""
    snapshots = hf_cache_dir() / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(snapshots.iterdir())
