"""The export stage keeps held-out and evaluation questions out of training data (scripted engine).

Three FlashRAG files, each carrying its own partition: ``trainset`` (train) is expanded by
DecEx; ``heldout`` (test) is what evaluations answer; ``extra.jsonl`` is an evaluation file named
only in ``export.decontamination.eval_files``. HotpotQA's first three questions bring passages.

    trainset:1  "WHO DIRECTED THE 1975 FILM 'JAWS' -- ADAPTED ..."  re-cased heldout:1  -> exact
    trainset:2  "Did Scott Derrickson and Ed Wood share ..."         paraphrase of heldout:2 -> embedding
    trainset:3  "How much money did the 1975 film Jaws make ..."     same film, other question -> kept
    trainset:4  "What is the capital of Canada?"                     copy of extra:1 -> exact
"""

from __future__ import annotations

import json

import pytest

from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, scripted_llm
from tests.flows.scripted_policies import decex_policy

HELDOUT = [
    ("1", "Who directed the 1975 film Jaws, adapted from the novel by Peter Benchley?", "Steven Spielberg"),
    ("2", "Were Scott Derrickson and Ed Wood of the same nationality?", "yes"),
]
TRAINSET = [
    ("1", "WHO DIRECTED THE 1975 FILM 'JAWS' -- ADAPTED FROM THE NOVEL BY PETER BENCHLEY", "Steven Spielberg"),
    ("2", "Did Scott Derrickson and Ed Wood share the same nationality?", "yes"),
    ("3", "How much money did the 1975 film Jaws make at the box office?", "$476 million"),
    ("4", "What is the capital of Canada?", "Ottawa"),
]
EXTRA = [("1", "What is the capital of Canada?", "Ottawa")]


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps({"id": i, "question": q, "golden_answers": [a]}) + "\n" for i, q, a in rows))
    return str(path)


@pytest.fixture
def scripted(engines):
    golden = {q: a for _, q, a in TRAINSET}
    engines(ScriptedBackend(decex_policy(golden)))


def _config(tmp_path, mode: str, judge: str | None = None) -> BuildConfig:
    return BuildConfig.model_validate(
        {
            "name": f"decontaminate-{mode}",
            "warehouse": {"root": str(tmp_path / "wh")},
            "datasets": [
                {"name": "hotpotqa", "limit": 3},
                {
                    "name": "trainset",
                    "format": "flashrag",
                    "path": _write(tmp_path / "train.jsonl", TRAINSET),
                    "partition": "train",
                },
                {
                    "name": "heldout",
                    "format": "flashrag",
                    "path": _write(tmp_path / "heldout.jsonl", HELDOUT),
                    "partition": "test",
                },
            ],
            "retrieval": {"dense": {"enabled": False}},
            "llm": scripted_llm(judge=judge),
            "search": {
                "strategies": ["decex"],
                "datasets": ["trainset"],
                "decex": {"k": 2, "n_rollouts": 2, "t_max": 2, "termination_samples": 1},
            },
            "export": {
                "decontamination": {
                    "mode": mode,
                    "eval_files": [
                        {"name": "extra", "format": "flashrag", "path": _write(tmp_path / "extra.jsonl", EXTRA)}
                    ],
                }
            },
        }
    )


def test_contaminated_rows_are_dropped_and_recorded(tmp_path, scripted):
    summary = build(_config(tmp_path, "drop"))
    assert summary["status"] == "completed", summary
    wh = Warehouse(tmp_path / "wh")
    matches = query(
        wh,
        """
        select distinct question_id, eval_question_id, method, action, eval_source from contamination
        order by question_id""",
    ).to_pylist()
    assert [(m["question_id"], m["eval_question_id"], m["method"], m["action"]) for m in matches] == [
        ("trainset:1", "heldout:1", "exact", "dropped"),
        ("trainset:2", "heldout:2", "embedding", "dropped"),
        ("trainset:4", "extra:1", "exact", "dropped"),
    ]
    assert matches[0]["eval_source"] == "warehouse:test" and matches[2]["eval_source"].endswith("extra.jsonl")
    tables = query(wh, "select distinct export_table from contamination order by 1").column(0).to_pylist()
    assert tables == ["preference_pairs", "sft_examples"]
    exported = query(
        wh,
        """
        select distinct question_id from (select question_id from sft_examples
                                          union all select question_id from preference_pairs)""",
    )
    assert exported.column(0).to_pylist() == ["trainset:3"]
    counted = query(wh, "select count(*) as n from contamination").to_pylist()[0]["n"]
    assert summary["exports"][0]["contaminated"] == counted > 3


def test_flag_mode_keeps_the_rows_and_records_them(tmp_path, scripted):
    build(_config(tmp_path, "flag"))
    wh = Warehouse(tmp_path / "wh")
    assert set(query(wh, "select distinct action from contamination").column(0).to_pylist()) == {"flagged"}
    exported = query(wh, "select distinct question_id from sft_examples order by 1").column(0).to_pylist()
    flagged = query(wh, "select distinct question_id from contamination order by 1").column(0).to_pylist()
    assert flagged == ["trainset:1", "trainset:2", "trainset:4"] and set(flagged) <= set(exported)


def test_the_judge_rules_on_embedding_matches_and_its_calls_are_kept(tmp_path, scripted, engines):
    """With the judge on, the paraphrase (an embedding-only match) counts only if the judge says
    yes; this judge says no, so trainset:2 is exported. Its one call is an llm_calls row."""
    judge = ScriptedBackend(lambda request, sample: "no", fingerprint="judge")
    config = _config(tmp_path, "drop", judge=engines(judge, "scripted:judge"))
    decontamination = config.export.decontamination.model_copy(update={"judge": True})
    build(config.model_copy(update={"export": config.export.model_copy(update={"decontamination": decontamination})}))
    wh = Warehouse(tmp_path / "wh")
    flagged = query(wh, "select distinct question_id from contamination order by 1").column(0).to_pylist()
    assert flagged == ["trainset:1", "trainset:4"]
    assert "trainset:2" in query(wh, "select distinct question_id from sft_examples").column(0).to_pylist()
    calls = query(wh, "select role, text from llm_calls where role = 'judge'").to_pylist()
    assert calls == [{"role": "judge", "text": "no"}] and judge.calls == 1
