"""Train / valid / test partitions: pinned by hand from the hash rule, independent of file order.

The rule (tasks/data/partitions.py): digest = sha256("<seed>\\x1f<dataset>\\x1f<question_id>"),
u = int.from_bytes(digest[:8], "big") / 2**64; train below 0.8, valid below 0.9, else test.
The first eight digest bytes below were computed once with hashlib, then pinned:

    dataset           question id                                          digest[:8]         u
    hotpotqa          hotpotqa:5ae143ed55429920d5234360                    3fde59012f5ba056   0.24949  train
    2wikimultihopqa   2wikimultihopqa:91edc89c0bdc11eba7f7acde48001122     d521f4e788b18a09   0.83255  valid
    musique           musique:2hop__327688_56873                           d59abbf0967d6790   0.83439  valid
    hotpotqa          hotpotqa:5ab97d0a5542996be202051e                    fad051359048649b   0.97974  test
    bamboogle         bamboogle:1                                          ba5c6cd287be482b   0.72797  test (evaluation-only)

0x3fde59012f5ba056 / 2**64 = 4602270046127513686 / 18446744073709551616 = 0.249486506...;
Bamboogle's u would put it in train, but the dataset is evaluation-only by default. With seed 7
the first question's digest starts 9115fc6eb24b9d31: u = 0.56674, still train.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pyarrow as pa
import pytest

from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.data.config import DatasetConfig, PartitionConfig
from ragfactory.tasks.data.loaders import bundled_names, bundled_path, load_bundled, load_questions
from ragfactory.tasks.data.partitions import (
    PartitionRule,
    assign_partitions,
    backfill_partitions,
    lacks_partitions,
    sample_keys,
    with_partitions,
)

GOLDEN = [
    ("hotpotqa", "hotpotqa:5ae143ed55429920d5234360", 0x3FDE59012F5BA056 / 2**64, "train"),
    ("2wikimultihopqa", "2wikimultihopqa:91edc89c0bdc11eba7f7acde48001122", 0xD521F4E788B18A09 / 2**64, "valid"),
    ("musique", "musique:2hop__327688_56873", 0xD59ABBF0967D6790 / 2**64, "valid"),
    ("hotpotqa", "hotpotqa:5ab97d0a5542996be202051e", 0xFAD051359048649B / 2**64, "test"),
    ("bamboogle", "bamboogle:1", 0xBA5C6CD287BE482B / 2**64, "test"),
]


@pytest.mark.parametrize("dataset,question_id,key,partition", GOLDEN)
def test_golden_partitions(dataset, question_id, key, partition):
    rule = PartitionConfig().rule_for(DatasetConfig(name=dataset))
    partitions, keys = assign_partitions(dataset, [question_id], rule)
    assert partitions == [partition]
    assert keys[0] == key


def test_golden_keys_in_decimal():
    keys = sample_keys("hotpotqa", ["hotpotqa:5ae143ed55429920d5234360"])
    assert keys[0] == pytest.approx(0.249486506, abs=1e-9)
    assert sample_keys("hotpotqa", ["hotpotqa:5ae143ed55429920d5234360"], seed=7)[0] == 0x9115FC6EB24B9D31 / 2**64
    assert sample_keys("bamboogle", ["bamboogle:1"])[0] == pytest.approx(0.727972795, abs=1e-9)


def test_bamboogle_is_evaluation_only_by_default_and_can_be_hashed():
    config = PartitionConfig()
    assert config.rule_for(DatasetConfig(name="bamboogle")).fixed == "test"
    assert config.rule_for(DatasetConfig(name="mine", format="bamboogle")).fixed == "test"
    hashed = config.rule_for(DatasetConfig(name="bamboogle", partition="hash"))
    assert assign_partitions("bamboogle", ["bamboogle:1"], hashed)[0] == ["train"]


def test_a_file_can_carry_its_own_partition():
    config = PartitionConfig()
    train = config.rule_for(DatasetConfig(name="mine", format="flashrag", path="train.jsonl", partition="train"))
    dev = config.rule_for(DatasetConfig(name="mine", format="flashrag", path="dev.jsonl", partition="valid"))
    ids = ["mine:1", "mine:2", "mine:3"]
    assert assign_partitions("mine", ids, train)[0] == ["train"] * 3
    assert assign_partitions("mine", ids, dev)[0] == ["valid"] * 3


def test_shuffling_a_dataset_file_changes_no_partition(tmp_path):
    lines = bundled_path("musique").read_text(encoding="utf-8").splitlines()
    random.Random(3).shuffle(lines)
    shuffled = tmp_path / "musique.jsonl"
    shuffled.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rule = PartitionRule()
    original = with_partitions(load_bundled("musique").questions, rule)
    reordered = with_partitions(load_questions(shuffled, "musique").questions, rule)
    assert [q["question_id"] for q in reordered] != [q["question_id"] for q in original]
    by_id = {q["question_id"]: (q["partition"], q["sample_key"]) for q in original}
    assert {q["question_id"]: (q["partition"], q["sample_key"]) for q in reordered} == by_id

    def first_train(rows, n=5):  # what a build with questions_per_dataset = 5 expands
        train = sorted((q["sample_key"], q["question_id"]) for q in rows if q["partition"] == "train")
        return [question_id for _, question_id in train[:n]]

    assert first_train(reordered) == first_train(original)


def test_bundled_shares_are_within_three_points_of_80_10_10():
    counts, bamboogle = Counter(), Counter()
    config = PartitionConfig()
    for name in bundled_names():
        rows = with_partitions(load_bundled(name).questions, config.rule_for(DatasetConfig(name=name)))
        (bamboogle if name == "bamboogle" else counts).update(row["partition"] for row in rows)
    total = sum(counts.values())
    assert total + sum(bamboogle.values()) == 1359
    assert bamboogle == {"test": 125}
    shares = {name: counts[name] / total for name in ("train", "valid", "test")}
    assert abs(shares["train"] - 0.8) <= 0.03, shares
    assert abs(shares["valid"] - 0.1) <= 0.03, shares
    assert abs(shares["test"] - 0.1) <= 0.03, shares


def test_configured_shares_and_seed():
    rule = PartitionConfig(seed=7, shares={"train": 0.5, "valid": 0.0, "test": 0.5}).rule_for(
        DatasetConfig(name="hotpotqa")
    )
    # u = 0.56674 with seed 7: above the train share of 0.5, and valid is empty
    assert assign_partitions("hotpotqa", ["hotpotqa:5ae143ed55429920d5234360"], rule)[0] == ["test"]
    with pytest.raises(ValueError, match="sum to 1"):
        BuildConfig.model_validate({"partitions": {"shares": {"train": 0.9, "valid": 0.1, "test": 0.1}}})
    with pytest.raises(ValueError, match="sum to 1"):
        PartitionRule(train=0.7)


def test_backfill_fills_only_missing_partitions():
    old = pa.table(
        {
            "question_id": ["hotpotqa:5ae143ed55429920d5234360", "hotpotqa:5ab97d0a5542996be202051e"],
            "dataset": ["hotpotqa", "hotpotqa"],
            "question": ["q1", "q2"],
        }
    )
    assert lacks_partitions(old)
    filled = backfill_partitions(old, PartitionRule())
    assert filled.column("partition").to_pylist() == ["train", "test"]
    assert not lacks_partitions(filled)
    moved = filled.set_column(filled.schema.get_field_index("partition"), "partition", pa.array(["valid", None]))
    again = backfill_partitions(moved, PartitionRule())
    assert again.column("partition").to_pylist() == ["valid", "test"]  # a set partition is kept
    assert json.dumps(again.column("sample_key").to_pylist()) == json.dumps(filled.column("sample_key").to_pylist())


def test_with_partitions_refuses_mixed_datasets():
    with pytest.raises(ValueError, match="one dataset"):
        with_partitions(
            [{"dataset": "a", "question_id": "a:1"}, {"dataset": "b", "question_id": "b:1"}], PartitionRule()
        )


def test_an_old_warehouse_is_backfilled_in_place(warehouse):
    """Questions shards written before schema 3 (no partition columns) get them, once."""
    import pyarrow.parquet as pq

    from ragfactory.tasks.ingest import backfill_question_partitions
    from ragfactory.warehouse.catalog import query

    old = pa.table(
        {
            "question_id": ["hotpotqa:5ae143ed55429920d5234360", "hotpotqa:5ab97d0a5542996be202051e"],
            "dataset": ["hotpotqa"] * 2,
            "question": ["q1", "q2"],
        }
    )
    folder = warehouse.root / "questions" / "dataset=hotpotqa"
    folder.mkdir(parents=True)
    pq.write_table(old, folder / "dev.parquet")
    bamboogle = warehouse.root / "questions" / "dataset=bamboogle"
    bamboogle.mkdir()
    pq.write_table(
        pa.table({"question_id": ["bamboogle:1"], "dataset": ["bamboogle"], "question": ["q"]}),
        bamboogle / "dev.parquet",
    )
    rewritten = backfill_question_partitions.fn(str(warehouse.root), PartitionConfig())
    assert sorted(rewritten) == sorted([str(folder / "dev.parquet"), str(bamboogle / "dev.parquet")])
    rows = query(warehouse, "select question_id, partition from questions order by question_id").to_pylist()
    assert rows == [
        {"question_id": "bamboogle:1", "partition": "test"},
        {"question_id": "hotpotqa:5ab97d0a5542996be202051e", "partition": "test"},
        {"question_id": "hotpotqa:5ae143ed55429920d5234360", "partition": "train"},
    ]
    assert backfill_question_partitions.fn(str(warehouse.root), PartitionConfig()) == []
