"""Why the generic DecEx exporters gave a question no row (tasks/export/skips.py)."""

from __future__ import annotations

from ragfactory.tasks.export.dpo import DpoConfig
from ragfactory.tasks.export.sft import SftConfig
from ragfactory.tasks.export.skips import recording, skip_rows
from ragfactory.tasks.search.decex.exports import preference_pairs, sft_examples
from ragfactory.warehouse.store import Warehouse
from tests.search.decex.decex_trees import QUESTIONS, small_tree


def test_dropped_questions_name_their_exporter_and_reason(tmp_path):
    with recording() as skips:
        assert sft_examples(small_tree(answer_value=0.4), QUESTIONS, SftConfig(min_reward=0.5)) == []
        assert sft_examples(small_tree(kept_answer=False), QUESTIONS) == []
        assert preference_pairs(small_tree(sub_values=(0.755, 0.75)), QUESTIONS, DpoConfig()) == []
        assert len(sft_examples(small_tree(), QUESTIONS)) == 1  # kept: no skip
    rows = skip_rows(skips)
    assert [(r["exporter"], r["reason"]) for r in rows] == [
        ("preference_pairs", "no sibling pair of the allowed labels has a value gap of at least 0.01"),
        ("sft_examples", "best kept chain's value 0.4 is below min_reward 0.5"),
        ("sft_examples", "no kept chain ends in a valued answer"),
    ]
    assert {(r["run_id"], r["question_id"], r["strategy"]) for r in rows} == {("r", "q", "decex")}
    Warehouse(tmp_path).write("export_skips", rows, "decex", partition={"run_id": "r"})


def test_outside_recording_exporters_keep_no_skips():
    assert sft_examples(small_tree(kept_answer=False), QUESTIONS) == []
    with recording() as skips:
        pass
    assert skips == []
