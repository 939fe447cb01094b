"""A small build's exports loaded by the trainers the papers used, with their own code.

verl 0.9.1 and LLaMA-Factory 0.9.5 pin libraries below ours, so they run in ``.venv-clients``
(``make venv-clients``; override with $RAGFACTORY_CLIENTS_PYTHON) through ``trainer_clients.py``,
and the test asserts on the JSON it prints. The build is the scripted DecEx + TreePS run of
``test_build_treeps`` on two HotpotQA questions: two verl prompts, two SFT examples, two pairs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.export.verl import REWARD_MODULE
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, registered_engine, scripted_llm
from tests.flows.test_build_treeps import policy

pytestmark = [pytest.mark.slow, pytest.mark.clients]

REPO = Path(__file__).resolve().parents[2]
CLIENTS_PYTHON = Path(os.environ.get("RAGFACTORY_CLIENTS_PYTHON", REPO / ".venv-clients" / "bin" / "python"))
SCRIPT = Path(__file__).with_name("trainer_clients.py")
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face."  # LLaMA-Factory's smollm2


def run_client(name: str, args: dict) -> dict:
    if not CLIENTS_PYTHON.exists():
        pytest.fail(f"{CLIENTS_PYTHON} is missing: run `make venv-clients`")
    done = subprocess.run([str(CLIENTS_PYTHON), str(SCRIPT), name, json.dumps(args)],
                          capture_output=True, text=True, timeout=300, cwd=args.get("output"))
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


@pytest.fixture(scope="module")
def run(tmp_path_factory, prefect_api):
    """One build for the module's tests, on the session's Prefect server (the engine double
    registered for its length only)."""
    root = tmp_path_factory.mktemp("clients") / "wh"
    config = BuildConfig.model_validate({
        "name": "clients", "warehouse": {"root": str(root)},
        "datasets": [{"name": "hotpotqa", "limit": 2}],
        "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
        "retrieval": {"dense": {"enabled": False}}, "llm": scripted_llm(),
        "search": {"strategies": ["decex", "treeps"],
                   "decex": {"k": 2, "n_rollouts": 2, "t_max": 1, "termination_samples": 1},
                   "treeps": {"n": 4, "depth": 2}},
    })
    with registered_engine(ScriptedBackend(policy)):
        summary = build(config)
    assert summary["status"] == "completed", summary
    return Warehouse(root), summary["run_id"]


def test_verl_loads_the_export_and_its_stock_reward_scores_it(run, embedded_model, tmp_path):
    wh, run_id = run
    path = wh.root / "artifacts" / "verl" / run_id / "treeps.parquet"
    got = run_client("verl", {"path": str(path), "model": str(embedded_model), "cache": str(tmp_path / "verl"),
                              "wrong": "no such answer", "reward_module": str(REWARD_MODULE),
                              "output": str(tmp_path)})
    warehouse = query(wh, "select v.data_source, q.golden_answers from verl_prompts v join questions q "
                          "using (question_id) order by v.extra_info.index").to_pylist()
    assert got["rows"] == len(warehouse) == 2
    assert got["data_sources"] == ["searchR1_hotpotqa", "searchR1_hotpotqa"]
    assert got["targets"] == [row["golden_answers"] for row in warehouse]
    assert got["scores"] == [[1.0, 0.0], [1.0, 0.0]]  # the gold answer in <answer>, then a wrong one
    assert got["custom"] == 1.0  # the shipped module scores a dataset stock verl does not know


def _lf_folder(wh: Warehouse, run_id: str) -> Path:
    return wh.root / "artifacts" / "llamafactory" / run_id


def _loaded(run, embedded_model, tmp_path, stage: str, table: str, key: str) -> tuple[dict, dict]:
    """LLaMA-Factory's load of the ``decex_<stage>`` dataset, and the warehouse row of its first
    example (by ``key``)."""
    wh, run_id = run
    got = run_client("llamafactory", {"folder": str(_lf_folder(wh, run_id)), "model": str(embedded_model),
                                      "stage": stage, "dataset": f"decex_{stage}", "output": str(tmp_path)})
    first = pq.read_table(_lf_folder(wh, run_id) / f"decex_{stage}.parquet").to_pylist()[0]
    [row] = query(wh, f"select * from {table} where {key} = $id", {"id": first[key]}).to_pylist()
    return got, row


def test_llamafactory_reads_the_sft_export_from_its_dataset_info(run, embedded_model, tmp_path):
    wh, _ = run
    got, row = _loaded(run, embedded_model, tmp_path, "sft", "sft_examples", "example_id")
    user, assistant = (m["content"] for m in row["messages"])
    assert got["rows"] == query(wh, "select count(*) as n from sft_examples").to_pylist()[0]["n"] == 2
    assert got["example"]["input"] == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
        f"<|im_start|>assistant\n{assistant}<|im_end|>\n"
    )
    assert got["example"]["labels"] == f"{assistant}<|im_end|>\n"  # loss on the assistant turn only


def test_llamafactory_reads_the_dpo_export_as_ranking_data(run, embedded_model, tmp_path):
    wh, _ = run
    got, row = _loaded(run, embedded_model, tmp_path, "dpo", "preference_pairs", "pair_id")
    user = row["prompt"][0]["content"]
    chosen, rejected = row["chosen"][0]["content"], row["rejected"][0]["content"]
    assert got["rows"] == query(wh, "select count(*) as n from preference_pairs").to_pylist()[0]["n"] == 2
    assert got["example"]["input"] == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
        f"<|im_start|>assistant\n{chosen}<|im_end|>\n"
    )
    assert (got["example"]["chosen"], got["example"]["rejected"]) == (
        f"{chosen}<|im_end|>\n", f"{rejected}<|im_end|>\n"
    )


def test_openrlhf_keys_read_the_warehouse_folders(run, tmp_path):
    """The README's OpenRLHF ``--dataset`` folders with its keys: SFT ``--input_key messages``,
    DPO ``--prompt_key prompt --chosen_key chosen --rejected_key rejected``."""
    wh, run_id = run
    load = lambda table: datasets.load_dataset(  # noqa: E731  (OpenRLHF's loader for a local folder)
        str(wh.root / table / f"run_id={run_id}"), split="train", cache_dir=str(tmp_path / "hf"))
    sft, pairs = load("sft_examples"), load("preference_pairs")
    assert len(sft) == len(pairs) == 2
    assert all([m["role"] for m in row["messages"]] == ["user", "assistant"] for row in sft)
    assert all((len(r["prompt"]), r["chosen"][0]["role"], r["rejected"][0]["role"]) == (1, "assistant", "assistant")
               for r in pairs)
