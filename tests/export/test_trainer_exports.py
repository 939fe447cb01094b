"""The trainer-facing files without the trainers: verl's data sources and reward overrides,
LLaMA-Factory's ``dataset_info.json`` and pair layout, and the OpenRLHF keys docs/training.md names.

The trainers themselves load a build's exports in ``test_trainer_clients.py``.
"""

from __future__ import annotations

import json

import datasets
import pyarrow.parquet as pq
import pytest

from ragfactory.tasks.export.llamafactory import dataset_entry, pair_table, write_llamafactory
from ragfactory.tasks.export.verl import REWARD_MODULE, data_source, reward_overrides, verl_command

TAGS = {
    "role_tag": "role",
    "content_tag": "content",
    "user_tag": "user",
    "assistant_tag": "assistant",
    "system_tag": "system",
}
SFT = {
    "example_id": "e1",
    "run_id": "r",
    "question_id": "q1",
    "strategy": "decex",
    "node_ids": ["n"],
    "messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "<answer> A </answer>"}],
}
PAIR = {
    "pair_id": "p1",
    "run_id": "r",
    "question_id": "q1",
    "strategy": "decex",
    "decision": "execution",
    "prompt": [{"role": "user", "content": "Q?"}],
    "chosen": [{"role": "assistant", "content": "good"}],
    "rejected": [{"role": "assistant", "content": "bad"}],
    "chosen_value": 1.0,
    "rejected_value": 0.0,
    "gap": 1.0,
    "chosen_node_id": "c",
    "rejected_node_id": "x",
}


def test_data_sources_are_verls_search_r1_names():
    assert data_source("hotpotqa") == "searchR1_hotpotqa" and data_source(None) == "searchR1_unknown"
    assert reward_overrides(["searchR1_hotpotqa", "searchR1_musique", "searchR1_bamboogle"]) == []
    assert reward_overrides(["searchR1_hotpotqa", "searchR1_mine"]) == [
        f"reward.custom_reward_function.path={REWARD_MODULE}",
        "reward.custom_reward_function.name=compute_score",
    ]
    assert REWARD_MODULE.is_file()


def test_verl_command_names_the_file_and_only_the_overrides_it_needs(tmp_path):
    path = tmp_path / "treeps.parquet"
    pq.write_table(datasets.Dataset.from_list([{"data_source": "searchR1_nq"}]).data.table, path)
    assert verl_command(path) == f"python -m verl.trainer.main_ppo data.train_files={path} data.prompt_key=prompt"


def test_dataset_info_entries_are_sharegpt_with_openai_tags():
    assert dataset_entry("sft", "decex_sft.parquet") == {
        "file_name": "decex_sft.parquet",
        "formatting": "sharegpt",
        "columns": {"messages": "messages"},
        "tags": TAGS,
    }
    assert dataset_entry("dpo", "decex_dpo.parquet") == {
        "file_name": "decex_dpo.parquet",
        "formatting": "sharegpt",
        "ranking": True,
        "columns": {"messages": "messages", "chosen": "chosen", "rejected": "rejected"},
        "tags": TAGS,
    }
    with pytest.raises(ValueError, match="one of"):
        dataset_entry("grpo", "x.parquet")


def test_pairs_take_llamafactorys_ranking_layout():
    row = pair_table([PAIR]).to_pylist()[0]
    assert row["messages"] == [{"role": "user", "content": "Q?"}] and "prompt" not in row
    assert (row["chosen"], row["rejected"]) == (
        {"role": "assistant", "content": "good"},
        {"role": "assistant", "content": "bad"},
    )
    two = dict(PAIR, rejected=PAIR["rejected"] * 2)
    with pytest.raises(ValueError, match="rejected holds 2 messages"):
        pair_table([two])


def test_the_folder_lists_every_strategys_shards(tmp_path):
    write_llamafactory(tmp_path, "decex", {"sft_examples": [SFT], "preference_pairs": [PAIR]})
    info = write_llamafactory(tmp_path, "mcts", {"sft_examples": [SFT], "preference_pairs": []})
    assert sorted(info) == ["decex_dpo", "decex_sft", "mcts_sft"]  # an empty table leaves no shard
    assert json.loads((tmp_path / "dataset_info.json").read_text()) == info
    assert pq.read_table(tmp_path / "mcts_sft.parquet").to_pylist()[0]["messages"] == SFT["messages"]


def test_openrlhf_keys_read_the_warehouse_exports(tmp_path):
    """The OpenRLHF flags of docs/training.md: SFT ``--input_key messages --apply_chat_template`` (prompt: every
    turn but the last), DPO ``--prompt_key prompt --chosen_key chosen --rejected_key rejected``."""
    for name, row in (("sft", SFT), ("dpo", PAIR)):
        pq.write_table(datasets.Dataset.from_list([row]).data.table, tmp_path / f"{name}.parquet")
    sft = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "sft.parquet"), split="train", cache_dir=str(tmp_path / "hf")
    )[0]
    assert (sft["messages"][:-1], sft["messages"][-1]["role"]) == ([{"role": "user", "content": "Q?"}], "assistant")
    dpo = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "dpo.parquet"), split="train", cache_dir=str(tmp_path / "hf")
    )[0]
    assert dpo["prompt"] + dpo["chosen"] == [
        {"role": "user", "content": "Q?"},
        {"role": "assistant", "content": "good"},
    ]
    assert dpo["prompt"] + dpo["rejected"] == [
        {"role": "user", "content": "Q?"},
        {"role": "assistant", "content": "bad"},
    ]
