"""Run ids by construction (``flows/config_hash.py``): the ids builds already have stay, a setting
added later leaves every config that does not use it alone, and a changed default cannot slip
through under an unchanged hash."""

from __future__ import annotations

from pathlib import Path

import yaml

from ragfactory.flows.config import BuildConfig, load_build_config
from ragfactory.flows.config_hash import NOT_OUTPUT, config_hash, field_paths, hash_payload, version_fields
from ragfactory.warehouse.runs import default_run_id

REPO = Path(__file__).resolve().parents[1]

# Every section set away from its defaults; its id was taken before the rule was written down.
EVERY_SECTION = {
    "name": "every-section",
    "seed": 7,
    "warehouse": {"root": "/tmp/elsewhere"},
    "datasets": [{"name": "hotpotqa"}, {"name": "musique"}],
    "partitions": {"seed": 3, "shares": {"train": 0.7, "valid": 0.15, "test": 0.15}, "eval_only": ["bamboogle"]},
    "corpus": {"from_datasets": True, "max_passage_chars": 4096},
    "retrieval": {"default": "bm25", "top_k": 5, "bm25": {"k1": 1.2, "b": 0.7}, "dense": {"enabled": False}},
    "llm": {
        "policy": {
            "backend": "transformers",
            "model": "embedded",
            "max_batch_size": 8,
            "options": {"kv_cache_mb": 512},
        },
        "judge": {"backend": "transformers", "model": "embedded"},
        "max_in_flight": 8,
        "max_batch_size": 32,
        "max_batch_tokens": 65536,
    },
    "search": {
        "strategies": ["decex", "treeps", "apex", "mcts", "r3"],
        "questions_per_dataset": 4,
        "shard_size": 2,
        "max_concurrent_shards": 2,
        "decex": {"k": 2, "n_rollouts": 2},
        "treeps": {"n": 4, "depth": 3},
        "apex": {"n_plans": 4},
        "mcts": {"iterations": 8},
        "r3": {"n_attempts": 2, "temperatures": [0.0, 1.0]},
    },
    "valuation": {"strategies": ["decex", "treeps"], "metric": "em"},
    "export": {
        "sft": {"min_reward": 0.5},
        "dpo": {"min_gap": 0.2},
        "trajectories": {"n_samples": 4},
        "decontamination": {"ngram": 10},
    },
    "runner": {"kind": "dask", "workers": 3},
    "allow_downloads": True,
}


def run_id(config: BuildConfig) -> str:
    return default_run_id(config.name, config.config_hash())


def test_the_golden_run_ids_hold(tmp_path):
    path = tmp_path / "every.yaml"
    path.write_text(yaml.safe_dump(EVERY_SECTION))
    assert run_id(load_build_config(REPO / "configs/demo.yaml")) == "demo-19656b4902"
    assert run_id(load_build_config(path)) == "every-section-6de88ab8bf"
    assert run_id(BuildConfig()) == "build-d41fc43ab7"


def test_every_version_1_field_still_exists_with_its_default_then():
    """A renamed, removed or re-defaulted field must come with a new HASH_VERSION."""
    now = set(field_paths(BuildConfig))
    known = version_fields()
    assert sorted(set(known) - now) == []
    dumped = BuildConfig().model_dump(mode="json")
    for path, then in known.items():
        if then == "<section>":
            continue
        node = dumped
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        assert node == then, f"{path}: default {then!r} at hash version 1, {node!r} now"


class Later(BuildConfig):
    """A config with a setting added after version 1."""

    later_setting: int = 3


def test_a_setting_added_later_enters_only_when_set():
    assert Later().config_hash() == BuildConfig().config_hash()
    assert "later_setting" not in hash_payload(Later())
    assert hash_payload(Later(later_setting=4))["later_setting"] == 4
    assert Later(later_setting=4).config_hash() != BuildConfig().config_hash()


def test_a_later_section_enters_whole_once_set_and_not_at_its_default():
    base = hash_payload(BuildConfig())
    assert "valuation" not in base and "mcts" not in base["search"] and "r3" not in base["search"]
    assert base["search"]["decex"]["k"] == 3  # a version-1 field enters at its default
    assert hash_payload(BuildConfig(valuation={"metric": "f1"}))["valuation"] == {"strategies": None, "metric": "f1"}
    mcts = hash_payload(BuildConfig(search={"mcts": {"iterations": 8}}))["search"]["mcts"]
    assert mcts["iterations"] == 8 and mcts["c"] == 1.414  # whole: its defaults beside the set field


def test_settings_that_change_no_row_stay_out():
    assert {"allow_downloads", "runner", "llm.max_batch_tokens"} <= NOT_OUTPUT
    base = BuildConfig().config_hash()
    assert BuildConfig(runner={"kind": "dask"}, allow_downloads=True).config_hash() == base
    assert BuildConfig(llm={"max_batch_tokens": 1024}, warehouse={"root": "/x"}).config_hash() == base
    assert config_hash(BuildConfig(seed=1)) != base
