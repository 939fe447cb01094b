"""A small build's exports loaded and launched by the trainers the papers used, with their own
entry points, as ``docs/clients.md`` says: its commands and YAML are read from that file.

verl 0.9.1, LLaMA-Factory 0.9.5 and OpenRLHF 0.11.2 pin libraries below ours, so they run in
``.venv-clients`` (``make venv-clients``; override with $RAGFACTORY_CLIENTS_PYTHON) through
``trainer_clients.py``, and the tests assert on the JSON it prints. The build is the scripted
DecEx + TreePS run of ``test_build_treeps`` on two HotpotQA questions: two verl prompts, two SFT
examples, two pairs.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.export.folders import export_targets, unloadable
from ragfactory.tasks.export.lengths import length_warnings
from ragfactory.tasks.export.verl import REWARD_MODULE
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.export.clients import run_client
from tests.fakes import ScriptedBackend, registered_engine, scripted_llm
from tests.flows.scripted_policies import treeps_and_decex

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.subprocess]

REPO = Path(__file__).resolve().parents[2]
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face."  # LLaMA-Factory's smollm2
DOCS = REPO / "docs" / "clients.md"
DOCS_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the docs' model; the tests use the embedded copy


def doc_block(name: str, root: Path, run_id: str, model: Path) -> str:
    """The code block of ``docs/clients.md`` marked ``<!-- test: name -->``, for this build."""
    found = re.search(rf"<!-- test: {re.escape(name)} -->\n```\w*\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert found, f"docs/clients.md has no block {name!r}"
    return found.group(1).replace("<root>", str(root)).replace("<run>", run_id).replace(DOCS_MODEL, str(model))


def doc_command(name: str, root: Path, run_id: str, model: Path, after: str) -> list[str]:
    """The arguments after ``after`` of the docs' shell command ``name``."""
    words = shlex.split(doc_block(name, root, run_id, model).replace("\\\n", " "))
    return words[words.index(after) + 1 :]


@pytest.fixture(scope="module")
def run(tmp_path_factory, prefect_api):
    """One build for the module's tests, on the session's Prefect server (the engine double
    registered for its length only)."""
    root = tmp_path_factory.mktemp("clients") / "wh"
    config = BuildConfig.model_validate(
        {
            "name": "clients",
            "warehouse": {"root": str(root)},
            "datasets": [{"name": "hotpotqa", "limit": 2}],
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(),
            "search": {
                "strategies": ["decex", "treeps"],
                "decex": {"k": 2, "n_rollouts": 2, "t_max": 1, "termination_samples": 1},
                "treeps": {"n": 4, "depth": 2},
            },
        }
    )
    with registered_engine(ScriptedBackend(treeps_and_decex)):
        summary = build(config)
    assert summary["status"] == "completed", summary
    return Warehouse(root), summary["run_id"]


def test_verl_main_ppo_resolves_the_docs_command_and_scores_the_export(run, embedded_model, tmp_path):
    wh, run_id = run
    overrides = doc_command("verl", wh.root, run_id, embedded_model, "verl.trainer.main_ppo")
    path = wh.root / "artifacts" / "verl" / run_id / "treeps.parquet"
    other = pq.read_table(path)  # the same rows from a dataset stock verl does not score
    other = other.set_column(
        other.schema.get_field_index("data_source"),
        "data_source",
        pc.replace_substring(other.column("data_source"), "hotpotqa", "my_eval"),
    )
    pq.write_table(other, tmp_path / "my_eval.parquet")
    custom = [o.replace(str(path), str(tmp_path / "my_eval.parquet")) for o in overrides] + [
        f"reward.custom_reward_function.path={REWARD_MODULE}",
        "reward.custom_reward_function.name=compute_score",
    ]
    got = run_client("verl_main", {"runs": [overrides, custom], "wrong": "no such answer", "output": str(tmp_path)})
    stock, shipped = got["runs"]
    assert (stock["rows"], stock["data_sources"], stock["reward_function"]) == (
        2,
        ["searchR1_hotpotqa", "searchR1_hotpotqa"],
        None,
    )
    assert stock["scores"] == [[1.0, 0.0], [1.0, 0.0]]  # the gold answer in <answer>, then a wrong one
    assert (shipped["data_sources"], shipped["reward_function"]) == (["searchR1_my_eval"] * 2, str(REWARD_MODULE))
    assert shipped["scores"] == [[1.0, 0.0], [1.0, 0.0]]


def _lf_folder(wh: Warehouse, run_id: str) -> Path:
    return wh.root / "artifacts" / "llamafactory" / run_id


def _loaded(run, embedded_model, tmp_path, stage: str, table: str, key: str) -> tuple[dict, dict]:
    """LLaMA-Factory's load of the ``decex_<stage>`` dataset, and the warehouse row of its first
    example (by ``key``)."""
    wh, run_id = run
    got = run_client(
        "llamafactory",
        {
            "folder": str(_lf_folder(wh, run_id)),
            "model": str(embedded_model),
            "stage": stage,
            "dataset": f"decex_{stage}",
            "output": str(tmp_path),
        },
    )
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
        f"{chosen}<|im_end|>\n",
        f"{rejected}<|im_end|>\n",
    )


@pytest.mark.parametrize("stage", ["sft", "dpo"])
def test_llamafactory_cli_trains_one_step_on_the_docs_yaml(run, embedded_model, tmp_path, stage):
    wh, run_id = run
    config = yaml.safe_load(doc_block(f"llamafactory-{stage}", wh.root, run_id, embedded_model))
    config |= {
        "output_dir": str(tmp_path / "out"),
        "max_steps": 1,
        "use_cpu": True,
        "bf16": False,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "overwrite_cache": True,
    }
    got = run_client("llamafactory_train", {"config": config, "output": str(tmp_path)})
    assert got["global_step"] == 1
    assert got["log"][0]["loss"] > 0


def test_openrlhf_parses_the_docs_flags_and_its_datasets_keep_every_row(run, embedded_model, tmp_path):
    """The docs' flags keep every row; at OpenRLHF's default DPO max_len, exactly the pairs the
    export's length check counts are dropped."""
    from transformers import AutoTokenizer

    wh, run_id = run
    sft = doc_command("openrlhf-sft", wh.root, run_id, embedded_model, "openrlhf.cli.train_sft")
    dpo = doc_command("openrlhf-dpo", wh.root, run_id, embedded_model, "openrlhf.cli.train_dpo")
    default_dpo = dpo[: dpo.index("--data.max_len")] + dpo[dpo.index("--data.max_len") + 2 :]
    got = run_client(
        "openrlhf",
        {"runs": [["train_sft", sft], ["train_dpo", dpo], ["train_dpo", default_dpo]], "output": str(tmp_path)},
    )["runs"]
    assert [(r["loaded"], r["kept"], r["max_len"]) for r in got[:2]] == [(2, 2, 4096), (2, 2, 2048)]
    assert got[0]["first"].endswith("<|im_end|>\n") and "<|im_start|>assistant\n" in got[0]["first"]

    tokenizer = AutoTokenizer.from_pretrained(embedded_model)

    def count(messages):  # OpenRLHF's count of a chat-template prompt
        prompt = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])

    pairs = query(wh, "select prompt, chosen, rejected from preference_pairs").to_pylist()
    lines = [line for line in length_warnings({"preference_pairs": pairs}, count) if "train_dpo" in line]
    dropped = int(re.search(r"drops (\d+) of", lines[0]).group(1)) if lines else 0
    assert (got[2]["max_len"], got[2]["loaded"], got[2]["kept"]) == (512, 2, 2 - dropped)


def test_every_export_folder_loads_with_each_venvs_datasets(run, tmp_path):
    wh, run_id = run
    mixed = Warehouse(tmp_path / "mixed")  # a folder where one strategy exported no rows
    mixed.write("sft_examples", query(wh, "select * from sft_examples"), "decex")
    mixed.write("sft_examples", [], "mute", partition={"run_id": run_id})
    targets = export_targets(wh) + export_targets(mixed)
    rows = [
        sum(pq.read_metadata(f).num_rows for f in ([t] if t.is_file() else sorted(t.glob("*.parquet"))))
        for t in targets
    ]
    got = run_client(
        "load_folders", {"targets": [str(t) for t in targets], "cache": str(tmp_path / "hf"), "output": str(tmp_path)}
    )
    assert got["version"] == "4.0.0" and got["rows"] == rows
    assert len(targets) == 10 and all(rows)  # 6 exported tables, a verl file, LLaMA-Factory's SFT and DPO
    assert unloadable(wh) == ([], 11)  # and with the factory's own datasets, the two trainer folders by their cards
