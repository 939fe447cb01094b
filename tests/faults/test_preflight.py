"""Preflight and clear failures, through the real CLI in a subprocess.

Each case runs `ragfactory` against a fresh root with every model hub unreachable (proxies and
HF_ENDPOINT point at a closed local port) and asserts what an operator sees: exactly one
`error:` line naming the thing at fault and the fix, the exit code within a stated time, no
traceback on screen, and a warehouse with no run left `running`. Config mistakes fail before
Prefect starts, so those cases take a few seconds; the binary dataset runs the real build flow
and must fail its ingest once, not three times.
"""

from __future__ import annotations

import json
import os

import pytest

from ragfactory.schemas.errors import PermanentError, is_permanent
from ragfactory.tasks.data.jsonl import NotJsonlError
from ragfactory.tasks.data.loaders import bundled_path
from ragfactory.tasks.retry import retry_unless_permanent
from ragfactory.warehouse.store import Warehouse
from tests.faults.cli import assert_fails_with, error_lines, run_cli

PREFLIGHT_S = 300.0  # a refused command's time limit: a hung one fails instead of stalling the suite
BUILD_S = 600.0  # the same for a build that starts its flow (Prefect's temporary server, imports)


def unknown_model(field: str, name: str) -> str:
    from huggingface_hub import constants

    return (
        f"{field}: unknown model {name!r}: not 'embedded', a local folder, a model id or latest:NAME from "
        f"the models table, or a model already in the local Hugging Face cache ({constants.HF_HUB_CACHE}); "
        "fix the name, or allow downloads (allow_downloads: true, or --allow-downloads) to fetch it from the hub"
    )


@pytest.mark.subprocess
def test_unknown_model_fails_fast_without_the_network(tmp_path):
    root = tmp_path / "wh"
    done = run_cli(
        ["evaluate", "--model", "sft-doesnotexist0000", "-d", "hotpotqa", "--limit", "1", "--mode", "direct"],
        tmp_path,
        root,
        PREFLIGHT_S,
    )
    assert_fails_with(done, "error: " + unknown_model("model", "sft-doesnotexist0000"), root)
    assert not (root / "runs").exists()


@pytest.mark.subprocess
def test_unknown_policy_model_of_a_build_fails_before_the_flow(tmp_path):
    root = tmp_path / "wh"
    (tmp_path / "build.yaml").write_text(
        "name: t\ndatasets: [{name: hotpotqa, limit: 3}]\nllm: {policy: {model: org/nowhere-1b}}\n"
    )
    done = run_cli(["build", "-c", "build.yaml"], tmp_path, root, PREFLIGHT_S)
    assert_fails_with(done, "error: build.yaml: " + unknown_model("llm.policy.model", "org/nowhere-1b"), root)
    assert "Starting temporary server" not in done.stdout + done.stderr


@pytest.mark.subprocess
def test_unknown_base_model_of_a_training_fails_before_the_flow(tmp_path):
    root = tmp_path / "wh"
    (tmp_path / "sft.parquet").write_bytes(b"")
    done = run_cli(
        ["train", "--method", "sft", "--parquet", "sft.parquet", "--base-model", "org/nowhere-1b"],
        tmp_path,
        root,
        PREFLIGHT_S,
    )
    assert_fails_with(done, "error: " + unknown_model("base_model", "org/nowhere-1b"), root)


@pytest.mark.subprocess
def test_missing_dataset_path_is_one_line_before_any_work(tmp_path):
    root = tmp_path / "wh"
    (tmp_path / "build.yaml").write_text(
        "name: t\ndatasets:\n  - {name: hotpotqa, path: data/hotpot_dev.jsonl}\ncorpus: {files: [data]}\n"
    )
    (tmp_path / "data").mkdir()
    done = run_cli(["build", "--config", "build.yaml"], tmp_path, root, PREFLIGHT_S)
    assert_fails_with(
        done,
        (
            "error: build.yaml: datasets[0].path: data/hotpot_dev.jsonl does not exist; fix the path (a relative "
            f"path is read from {tmp_path.resolve()}); corpus.files[0]: data is not a file (a JSONL file is expected)"
        ),
        root,
    )
    assert not (root / "runs").exists()


@pytest.mark.subprocess
def test_a_dataset_name_a_partition_folder_would_change_is_refused_naming_the_field(tmp_path):
    root = tmp_path / "wh"
    (tmp_path / "dev.jsonl").write_text("".join(bundled_path("hotpotqa").read_text().splitlines(keepends=True)[:3]))
    (tmp_path / "build.yaml").write_text(
        'name: t\ndatasets: [{name: "hotpot dev", format: hotpotqa, path: dev.jsonl}]\nsearch: {strategies: [decex]}\n'
    )
    done = run_cli(["build", "-c", "build.yaml"], tmp_path, root, PREFLIGHT_S)
    assert_fails_with(
        done,
        (
            "error: build.yaml: datasets.0.name: 'hotpot dev' would be read back as 'hotpot_dev' from its "
            "dataset=<name> folder; a dataset name keeps to letters, digits, '_', '.' and '-' (not '.' or '..')"
        ),
        root,
    )
    assert not root.exists() or not (root / "runs").exists()


RUN_ID_CHARACTERS = "a run id keeps to letters, digits, '_', '.' and '-' (not '.' or '..')"


@pytest.mark.subprocess
def test_a_run_id_a_partition_folder_would_change_is_refused_naming_the_option(tmp_path):
    root = tmp_path / "wh"
    (tmp_path / "build.yaml").write_text("name: t\ndatasets: [{name: bamboogle, limit: 2}]\nsearch: {strategies: []}\n")
    folder = "'a b' would be read back as 'a_b' from its run_id=<name> folder"
    done = run_cli(["build", "-c", "build.yaml", "--run-id", "a b"], tmp_path, root, PREFLIGHT_S)
    assert_fails_with(done, f"error: --run-id: {folder}; {RUN_ID_CHARACTERS}", root)
    # a training names a build by its run id: "a b" would find the files of build "a_b"
    done = run_cli(["train", "--method", "sft", "--run-id", "a b"], tmp_path, root, PREFLIGHT_S)
    assert_fails_with(done, f"error: run_id: {folder}; {RUN_ID_CHARACTERS}", root)
    assert not root.exists()


def test_a_build_flow_given_such_a_run_id_by_its_caller_records_no_run(tmp_path):
    from ragfactory.flows.build import build
    from ragfactory.flows.config import BuildConfig
    from ragfactory.flows.runs import RunIdError

    root = tmp_path / "wh"
    config = {"name": "t", "warehouse": {"root": str(root)}, "datasets": [{"name": "bamboogle", "limit": 2}]}
    with pytest.raises(RunIdError) as refused:
        build(BuildConfig.model_validate(config | {"search": {"strategies": []}}), run_id="nightly/2026")
    folder = "'nightly/2026' would be read back as 'nightly_2026' from its run_id=<name> folder"
    assert str(refused.value) == f"run_id: {folder}; {RUN_ID_CHARACTERS}"
    assert not (root / "runs").exists() and not (root / "questions").exists()


@pytest.mark.subprocess
def test_corpus_files_that_would_be_one_passage_source_are_refused_naming_both(tmp_path):
    # a/wiki.jsonl and b/wiki.jsonl would both be source 'wiki', and hotpotqa.jsonl the dataset's own
    root = tmp_path / "wh"
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "wiki.jsonl").write_text('{"id": "p1", "contents": "\\"T\\"\\ntext"}\n')
    (tmp_path / "hotpotqa.jsonl").write_text('{"id": "p2", "contents": "\\"T\\"\\ntext"}\n')
    (tmp_path / "build.yaml").write_text(
        "name: t\ndatasets: [{name: hotpotqa, limit: 2}]\n"
        "corpus: {files: [a/wiki.jsonl, b/wiki.jsonl, hotpotqa.jsonl]}\nsearch: {strategies: []}\n"
    )
    done = run_cli(["build", "--config", "build.yaml"], tmp_path, root, PREFLIGHT_S)
    rename = "rename the file so that each corpus file and dataset is its own source"
    assert_fails_with(
        done,
        (
            "error: build.yaml: corpus.files[1]: b/wiki.jsonl would be passage source 'wiki', as corpus.files "
            f"a/wiki.jsonl is; {rename}; corpus.files[2]: hotpotqa.jsonl would be passage source 'hotpotqa', "
            f"as datasets 'hotpotqa' is; {rename}"
        ),
        root,
    )
    assert not root.exists()


@pytest.mark.subprocess
def test_debug_puts_the_traceback_on_screen_too(tmp_path):
    (tmp_path / "build.yaml").write_text("name: t\ndatasets: [{name: hotpotqa, path: missing.jsonl}]\n")
    done = run_cli(["--debug", "build", "-c", "build.yaml"], tmp_path, tmp_path / "wh", PREFLIGHT_S)
    assert done.returncode == 1
    assert "Traceback" in done.stdout + done.stderr
    assert error_lines(done)[-1].startswith("error: build.yaml: datasets[0].path: missing.jsonl does not exist")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the config file is empty; give at least `name` and `datasets` (see configs/demo.yaml)"),
        ("# only a comment\n", "the config file is empty; give at least `name` and `datasets` (see configs/demo.yaml)"),
        ("- name: hotpotqa\n", "expected a mapping of settings (name, datasets, search, ...), got a YAML list"),
    ],
)
@pytest.mark.subprocess
def test_empty_or_non_mapping_config_is_an_error_naming_the_file(tmp_path, text, problem):
    root = tmp_path / "wh"
    (tmp_path / "empty.yaml").write_text(text)
    done = run_cli(["build", "-c", "empty.yaml"], tmp_path, root, PREFLIGHT_S)
    assert_fails_with(done, f"error: empty.yaml: {problem}", root)
    assert not root.exists() or not (root / "runs").exists()


@pytest.mark.subprocess
def test_binary_dataset_fails_once_with_one_line_and_the_traceback_in_the_log(tmp_path):
    root = tmp_path / "wh"
    binary = tmp_path / "hotpot.jsonl"
    binary.write_bytes(bytes(range(256)) * 16)
    (tmp_path / "build.yaml").write_text(
        f"name: t\ndatasets: [{{name: hotpotqa, path: {binary}}}]\nretrieval: {{dense: {{enabled: false}}}}\n"
    )
    done = run_cli(["build", "-c", "build.yaml"], tmp_path, root, BUILD_S)
    logs = sorted((root / "logs").glob("build-*.log"))
    assert len(logs) == 1, done.stdout + done.stderr
    assert_fails_with(
        done,
        (f"error: shard hotpotqa failed: {binary}: not a JSONL file (binary content) (log: {logs[0]})"),
        root,
        before_flow=False,
    )
    log = logs[0].read_text()
    assert "Retry 1/2" not in log and "Retry" not in done.stdout  # one attempt: permanent errors are not retried
    assert log.count("Finished in state Failed('Task run encountered an exception NotJsonlError") == 1
    assert "Traceback (most recent call last)" in log and "NotJsonlError" in log
    statuses = {row["run_id"]: row["status"] for row in Warehouse(root).read("runs").to_pylist()}
    assert list(statuses.values()) == ["failed"]


class _State:
    """The part of a Prefect Failed state that the retry condition reads."""

    def __init__(self, data):
        self.data = data

    def result(self, raise_on_failure=False):
        return self.data


@pytest.mark.parametrize(
    ("error", "permanent"),
    [
        (FileNotFoundError("data/x.jsonl"), True),
        (IsADirectoryError("data"), True),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), True),
        (json.JSONDecodeError("Expecting value", "x", 0), True),
        (NotJsonlError("x.jsonl: not a JSONL file (binary content)"), True),
        (PermanentError("unknown model"), True),
        (RuntimeError("engine failed"), False),
        (ConnectionError("reset by peer"), False),
        (TimeoutError("read timed out"), False),
    ],
)
def test_retry_condition_gives_up_on_permanent_errors_only(error, permanent):
    assert is_permanent(error) is permanent
    assert retry_unless_permanent(None, None, _State(error)) is (not permanent)


def test_a_permanent_cause_is_permanent_and_a_state_without_an_exception_retries():
    try:
        try:
            raise FileNotFoundError("corpus.jsonl")
        except FileNotFoundError as exc:
            raise RuntimeError("shard failed") from exc
    except RuntimeError as wrapped:
        assert is_permanent(wrapped)
    assert retry_unless_permanent(None, None, _State(None)) is True


def test_validation_errors_are_permanent():
    from pydantic import ValidationError

    from ragfactory.flows.config import BuildConfig

    with pytest.raises(ValidationError) as info:
        BuildConfig.model_validate({"nmae": "typo"})
    assert is_permanent(info.value)


# The preflight checks themselves, without Prefect or a subprocess.


def test_models_resolve_from_the_registry_a_folder_or_the_local_hub_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from ragfactory.tasks.preflight import encoder_problem, model_problem
    from tests.training.exports import register_trained

    wh = Warehouse(tmp_path / "wh")
    register_trained(wh, tmp_path, "sft-kept", "nightly", day=1)
    register_trained(wh, tmp_path, "sft-gone", "gone", day=2, keep=False)
    snapshot = tmp_path / "hub" / "models--org--cached-1b" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    for spec in ("embedded", "SmolLM2", "sft-kept", "latest:nightly", str(tmp_path / "sft-kept"), "org/cached-1b"):
        assert model_problem("model", spec, wh) is None, spec
    assert model_problem("model", "org/other-1b", wh, allow_downloads=True) is None
    assert model_problem("model", "sft-gone", wh) == (
        f"model: model 'sft-gone' is registered in {wh.root} but its weights are not on disk"
    )
    assert model_problem("model", "latest:gone", wh).startswith(
        "model: no trained model of lineage 'gone' with weights on disk in "
    )
    assert model_problem("model", "org/other-1b", wh).startswith("model: unknown model 'org/other-1b': ")
    assert encoder_problem("retrieval.dense.model", "all-MiniLM-L6-v2") is None
    assert encoder_problem("retrieval.dense.model", "paraphrase-x").startswith(
        "retrieval.dense.model: unknown sentence-transformers model 'paraphrase-x': "
    )


def test_a_build_check_names_every_problem_at_once(tmp_path):
    from ragfactory.flows.config import BuildConfig
    from ragfactory.tasks.preflight import PreflightError, check_build

    config = BuildConfig.model_validate(
        {
            "datasets": [{"name": "hotpotqa"}, {"name": "mine"}, {"name": "x", "path": str(tmp_path)}],
            "corpus": {"files": [str(tmp_path / "wiki.jsonl")]},
            "llm": {"judge": {"model": "nowhere-judge"}},
            "retrieval": {"dense": {"enabled": False}},
        }
    )
    with pytest.raises(PreflightError) as info:
        check_build(config, Warehouse(tmp_path / "wh"))
    message = str(info.value)
    problems = [
        "datasets[1]: no bundled dataset 'mine'; bundled: ",
        f"datasets[2].path: {tmp_path} is not a file",
        f"corpus.files[0]: {tmp_path / 'wiki.jsonl'} does not exist",
        "llm.judge.model: unknown model 'nowhere-judge'",
    ]
    positions = [message.find("; " + problem if i else problem) for i, problem in enumerate(problems)]
    assert positions[0] == 0 and positions == sorted(positions) and -1 not in positions, message
    assert "\n" not in message
    assert is_permanent(info.value) and isinstance(info.value, LookupError)
    check_build(
        config.model_copy(
            update={
                "datasets": [],
                "corpus": config.corpus.model_copy(update={"files": []}),
                "llm": config.llm.model_copy(update={"judge": None}),
            }
        ),
        Warehouse(tmp_path / "wh"),
    )


def test_the_network_policy_turns_an_imported_hub_client_offline(monkeypatch):
    from huggingface_hub import constants

    from ragfactory.tasks.preflight import apply_network_policy

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    apply_network_policy(allow_downloads=True)
    assert "HF_HUB_OFFLINE" not in os.environ and constants.HF_HUB_OFFLINE is False
    apply_network_policy(allow_downloads=False)
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["TRANSFORMERS_OFFLINE"] == "1"
    assert constants.HF_HUB_OFFLINE is True


def test_an_engine_not_registered_in_this_process_fails_before_the_flow(tmp_path, engines):
    """A registered plugged engine passes (its model is its own business); one registered only in
    another process (say, a test's, seen from a worker) is named with what this process has."""
    from ragfactory.flows.config import BuildConfig
    from ragfactory.tasks.preflight import PreflightError, check_build
    from tests.fakes import ScriptedBackend, scripted_llm

    name = engines(ScriptedBackend())
    check_build(
        BuildConfig.model_validate({"llm": {"policy": {"backend": name, "model": "served-elsewhere"}}}),
        Warehouse(tmp_path),
    )
    config = BuildConfig.model_validate({"llm": scripted_llm(judge="scripted:other-process")})
    with pytest.raises(
        PreflightError,
        match=r"llm.judge.backend: no engine 'scripted:other-process' is "
        r"registered in this process; registered: null, openai, scripted:engine",
    ):
        check_build(config, Warehouse(tmp_path))
