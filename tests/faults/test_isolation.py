"""Isolation between builds, and input limits: faults a shared warehouse root meets.

Builds into one root must never shrink or replace inputs another run read: ingest adds rows by
key and records what it produced as a version (``tasks/data/versions.py``); a run expands only
the questions of the versions it ingested. A 0-byte dataset warns instead of passing as a silent
success, and a passage over ``corpus.max_passage_chars`` is a reject naming its id and size.
The engine is the only double (a scripted DecEx policy): the real flow, tasks and warehouse run.
"""

from __future__ import annotations

import threading

import pyarrow.parquet as pq
import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.tasks.data.config import DatasetConfig
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.ingest import ingest_corpus, ingest_dataset
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import decex_policy

# Each test, its builds and ingests included, ends within this many seconds (the two concurrent
# builds take about 40 s here); a hang fails the test instead of the suite.
pytestmark = pytest.mark.timeout(600)

# the bundled HotpotQA sample (ragfactory/data/hotpotqa/dev.jsonl): 500 questions whose context
# paragraphs make 4,956 distinct passages
HOTPOTQA_QUESTIONS = 500
HOTPOTQA_PASSAGES = 4956


def _counts(wh: Warehouse) -> dict[str, int]:
    rows = query(
        wh,
        """
        select 'questions' as t, count(*) as n from questions where dataset = 'hotpotqa'
        union all select 'distinct_questions', count(distinct question_id) from questions where dataset = 'hotpotqa'
        union all select 'passages', count(*) from passages where source = 'hotpotqa'
        union all select 'distinct_passages', count(distinct passage_id) from passages where source = 'hotpotqa'
    """,
    ).to_pylist()
    return {row["t"]: row["n"] for row in rows}


def test_a_limit_3_ingest_after_a_full_one_leaves_every_row(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    full = ingest_dataset(str(wh.root), DatasetConfig(name="hotpotqa"))
    small = ingest_dataset(str(wh.root), DatasetConfig(name="hotpotqa", limit=3))
    assert (full["questions"], full["passages"]) == (HOTPOTQA_QUESTIONS, HOTPOTQA_PASSAGES)
    assert small["questions"] == 3 and small["version"] != full["version"]
    assert _counts(wh) == {
        "questions": HOTPOTQA_QUESTIONS,
        "distinct_questions": HOTPOTQA_QUESTIONS,
        "passages": HOTPOTQA_PASSAGES,
        "distinct_passages": HOTPOTQA_PASSAGES,
    }
    [row] = query(wh, "select question_ids from ingests where version = $v", {"v": small["version"]}).to_pylist()
    assert row["question_ids"] == [q["question_id"] for q in load_bundled("hotpotqa", limit=3).questions]


def test_ingesting_the_same_version_again_does_nothing(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    first = ingest_dataset(str(wh.root), DatasetConfig(name="hotpotqa", limit=5))
    before = {p: p.stat().st_mtime_ns for p in wh.root.rglob("*.parquet")}
    again = ingest_dataset(str(wh.root), DatasetConfig(name="hotpotqa", limit=5))
    assert again == {**first, "cached": True} and first["cached"] is False
    assert {p: p.stat().st_mtime_ns for p in wh.root.rglob("*.parquet")} == before


def _decex_config(root, name: str, datasets: list[dict]) -> BuildConfig:
    return BuildConfig.model_validate(
        {
            "name": name,
            "warehouse": {"root": str(root)},
            "datasets": datasets,
            "partitions": {"shares": {"train": 1.0, "valid": 0.0, "test": 0.0}},  # expand every question
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(),
            "search": {
                "strategies": ["decex"],
                "shard_size": 2,
                "decex": {"k": 2, "n_rollouts": 1, "t_max": 2, "termination_samples": 1},
            },
        }
    )


def test_two_builds_with_different_configs_at_once_leave_both_intact(tmp_path, engines):
    gold = {q["question"]: q["golden_answers"][0] for q in load_bundled("hotpotqa", limit=6).questions}
    engines(ScriptedBackend(decex_policy(gold)))
    root = tmp_path / "wh"
    configs = {
        "small": _decex_config(root, "small", [{"name": "hotpotqa", "limit": 3}]),
        "wide": _decex_config(root, "wide", [{"name": "hotpotqa", "limit": 6}, {"name": "musique", "limit": 2}]),
    }
    summaries, errors = {}, []

    def run(name: str) -> None:
        try:
            summaries[name] = build(configs[name])
        except BaseException as exc:  # surfaced by the assertion below, with the build's name
            errors.append(f"{name}: {exc!r}")

    threads = [threading.Thread(target=run, args=(name,)) for name in configs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=540)
    assert not errors and not any(t.is_alive() for t in threads), errors
    assert {n: s["status"] for n, s in summaries.items()} == {"small": "completed", "wide": "completed"}

    wh = Warehouse(root)
    hotpot = [q["question_id"] for q in load_bundled("hotpotqa", limit=6).questions]
    musique = [q["question_id"] for q in load_bundled("musique", limit=2).questions]
    held = query(wh, "select question_id from questions order by question_id").column("question_id").to_pylist()
    assert held == sorted(hotpot + musique)  # the union of both builds' questions, each once
    expected = {"small": set(hotpot[:3]), "wide": set(hotpot + musique)}
    for name, summary in summaries.items():
        expanded = (
            query(wh, "select distinct question_id from nodes where run_id = $r", {"r": summary["run_id"]})
            .column("question_id")
            .to_pylist()
        )
        assert set(expanded) == expected[name], name
        [run_row] = query(wh, "select inputs from runs where run_id = $r", {"r": summary["run_id"]}).to_pylist()
        versions = {r["source"]: r["version"] for r in summary["ingested"]}
        assert {i["dataset"]: i["version"] for i in run_row["inputs"]} == versions
        chosen = (
            query(
                wh,
                "select unnest(question_ids) as q from ingests where list_contains($v, version)",
                {"v": list(versions.values())},
            )
            .column("q")
            .to_pylist()
        )
        assert set(chosen) == expected[name], name


def test_a_0_byte_dataset_warns_in_the_log_and_the_run(tmp_path, caplog):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    config = BuildConfig.model_validate(
        {
            "name": "empty",
            "warehouse": {"root": str(tmp_path / "wh")},
            "datasets": [{"name": "mine", "format": "hotpotqa", "path": str(empty)}],
        }
    )
    summary = build(config)
    message = f"dataset mine: {empty} is empty (0 bytes); nothing ingested"
    assert summary["status"] == "completed" and message in summary["warnings"]
    assert any(message in record.getMessage() and record.levelname == "WARNING" for record in caplog.records)
    [run] = query(Warehouse(tmp_path / "wh"), "select warnings from runs").to_pylist()
    assert message in run["warnings"]


def test_an_oversize_passage_lands_in_rejects_with_its_id_and_size(tmp_path):
    corpus = tmp_path / "wiki.jsonl"
    lines = [
        '{"id": "ok-1", "contents": "\\"Paris\\"\\nParis is the capital of France."}',
        '{"id": "big-7", "contents": "\\"Blob\\"\\n' + "x" * 150 + '"}',
        '{"id": "huge-9", "contents": "' + "y" * 20_000 + '"}',
    ]  # over 128 bytes per allowed char
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    wh = Warehouse(tmp_path / "wh")
    result = ingest_corpus(str(wh.root), str(corpus), max_passage_chars=100)
    assert (result["passages"], result["rejects"]) == (1, 2)
    assert query(wh, "select passage_id from passages").column("passage_id").to_pylist() == ["ok-1"]
    rejects = query(wh, "select line, reason, raw from rejects order by line").to_pylist()
    assert rejects[0]["line"] == 2
    assert rejects[0]["reason"] == "passage big-7 is 154 chars, over max_passage_chars 100"
    assert rejects[1]["line"] == 3 and rejects[1]["reason"].startswith("line of 20,032 bytes, over the 12,800-byte")
    assert rejects[1]["raw"].startswith('{"id": "huge-9"')  # the head of the line names it
    assert len(pq.read_table(next(wh.root.glob("rejects/**/*.parquet"))).column("raw")[1].as_py()) <= 2000


MERGE_LOOP = """
import sys
from ragfactory.warehouse.store import Warehouse
wh, writer = Warehouse(sys.argv[1]), sys.argv[2]
for i in range(25):
    rows = [{"passage_id": f"{writer}-{i}", "source": "shared", "title": "t", "text": f"{writer} {i}"}]
    wh.merge("passages", rows, "dev", partition={"source": "shared"})
"""


@pytest.mark.subprocess
def test_two_processes_merging_one_shard_lose_no_row(tmp_path):
    """Each merge is a read-union-write of the same file; without the shard's lock the second
    writer's union misses the first's rows."""
    import subprocess
    import sys

    from ragfactory.warehouse.integrity import check

    root = tmp_path / "wh"
    procs = [subprocess.Popen([sys.executable, "-c", MERGE_LOOP, str(root), name]) for name in ("a", "b")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    wh = Warehouse(root)
    ids = sorted(wh.read("passages").column("passage_id").to_pylist())
    assert ids == sorted(f"{w}-{i}" for w in "ab" for i in range(25))
    assert check(wh) == []


def test_an_oversize_paragraph_of_a_dataset_is_a_reject_and_its_question_loads(tmp_path):
    import json

    from ragfactory.tasks.data.jsonl import JsonlLimits
    from ragfactory.tasks.data.loaders import load_questions
    from ragfactory.tasks.data.passages import passage_id

    row = {
        "_id": "q1",
        "question": "Who?",
        "answer": "Ann",
        "context": [["Small", ["Ann wrote it."]], ["Blob", ["z" * 200]]],
    }
    path = tmp_path / "dev.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    result = load_questions(path, "mine", "hotpotqa", limits=JsonlLimits.for_passages(100))
    assert [q["question_id"] for q in result.questions] == ["mine:q1"]
    assert [p["title"] for p in result.passages] == ["Small"]
    [reject] = result.rejects
    assert reject["line"] == 1
    assert reject["reason"] == f"passage {passage_id('Blob', 'z' * 200)} is 204 chars, over max_passage_chars 100"
