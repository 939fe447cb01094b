"""The Flywheel page over a warehouse written by hand: two nights of a pipeline, the first
promoting its candidate, the second keeping it (its candidate's interval reaches below zero)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from fastapi.testclient import TestClient

from ragfactory.dashboard.app import create_app
from ragfactory.tasks.eval.promotion import Decision, PromotionConfig, promotion_row
from ragfactory.tasks.training.registry import model_row, register_model
from ragfactory.warehouse.runs import record_run
from ragfactory.warehouse.store import Warehouse

T0 = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.UTC)


def _night(
    wh: Warehouse,
    night: str,
    run_id: str,
    questions: list[str],
    model_id: str,
    decision: Decision,
    incumbent: str,
    hours: int,
) -> None:
    record_run(wh, run_id, "build", "completed", {}, "h", T0 + dt.timedelta(hours=hours))
    wh.write(
        "nodes",
        [
            {
                "node_id": f"{run_id}-{q}",
                "run_id": run_id,
                "question_id": q,
                "strategy": "decex",
                "kind": "question",
                "depth": 0,
            }
            for q in questions
        ],
        shard="decex-0000",
    )
    wh.write(
        "sft_examples",
        [
            {
                "example_id": f"{run_id}-e{i}",
                "run_id": run_id,
                "question_id": q,
                "strategy": "decex",
                "messages": [],
                "node_ids": [],
            }
            for i, q in enumerate(questions)
        ],
        shard="decex",
    )
    register_model(
        wh,
        model_row(model_id, {"run_id": run_id}, incumbent, "sft", "snap", {}, {"train_loss": 2.5 - hours}, "/nowhere"),
    )
    row = promotion_row(
        "nightly",
        night,
        model_id,
        incumbent,
        PromotionConfig(),
        decision,
        T0 + dt.timedelta(hours=hours, minutes=30),
        run_id,
    )
    wh.write("promotions", [row], night)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("flywheel") / "wh")
    _night(
        wh,
        "2026-11-01",
        "b-n1",
        ["q1", "q2"],
        "sft-a",
        Decision("promote", "lies above zero", 4, 0.25, 0.125, 0.375, 0.001),
        "embedded",
        0,
    )
    _night(
        wh,
        "2026-11-02",
        "b-n2",
        ["q3", "q4", "q5"],
        "sft-b",
        Decision("keep", "does not lie above zero", 4, 0.05, -0.1, 0.2, 0.3),
        "sft-a",
        1,
    )
    # sft-a, promoted on night 1 and kept on night 2: agentic F1 on valid (1 + 0.5 + 0 + 0.5) / 4 = 0.5
    # and on test (0.25 + 0.5) / 2 = 0.375; its direct-mode F1 of 1.0 is another mode, not plotted.
    _evals(wh, "ev-valid", "sft-a", "valid", "agentic", [1.0, 0.5, 0.0, 0.5])
    _evals(wh, "ev-test", "sft-a", "test", "agentic", [0.25, 0.5])
    _evals(wh, "ev-direct", "sft-a", "valid", "direct", [1.0])
    # embedded, night 1's incumbent, where the line starts: (0 + 0.5 + 0 + 0) / 4 = 0.125 on valid
    # and 0 on test
    _evals(wh, "ev-base-valid", "embedded", "valid", "agentic", [0.0, 0.5, 0.0, 0.0])
    _evals(wh, "ev-base-test", "embedded", "test", "agentic", [0.0, 0.0])
    return TestClient(create_app(wh))


def _evals(wh: Warehouse, run_id: str, model_id: str, partition: str, mode: str, f1: list[float]) -> None:
    wh.write(
        "evals",
        [
            {
                "eval_id": f"{run_id}-{i}",
                "run_id": run_id,
                "model_id": model_id,
                "dataset": "hotpotqa",
                "mode": mode,
                "question_id": f"q{i}",
                "em": 0.0,
                "f1": v,
                "cover_em": 0.0,
                "partition": partition,
            }
            for i, v in enumerate(f1)
        ],
        "eval",
        partition={"run_id": run_id},
    )


def _cells(page: str, night: str) -> list[str]:
    """The text of each cell of a night's row, from the questions column on."""
    row = page[page.index(f'id="night-nightly-{night}"') :]
    row = row[: row.index("</tr>")]
    return [c.split(">", 1)[1].split("<")[0] for c in row.split("<td")[1:]][3:]


def test_the_flywheel_page_shows_each_night_built_trained_and_decided(client):
    page = client.get("/flywheel").text
    assert page.index("2026-11-01") < page.index("2026-11-02")
    assert _cells(page, "2026-11-01") == [
        "2",
        "2",
        "0",
        "sft-a",
        "2.5000",
        "embedded",
        "agentic f1",
        "4",
        "+0.2500",
        "[+0.1250, +0.3750]",
        "0.0010",
        "promote",
        "lies above zero",
    ]
    assert _cells(page, "2026-11-02") == [
        "3",
        "3",
        "0",
        "sft-b",
        "1.5000",
        "sft-a",
        "agentic f1",
        "4",
        "+0.0500",
        "[-0.1000, +0.2000]",
        "0.3000",
        "keep",
        "does not lie above zero",
    ]


def test_the_promoted_models_valid_and_test_scores_are_plotted_from_the_start_night_by_night(client):
    page = client.get("/flywheel").text
    for night in ("2026-11-01", "2026-11-02"):
        row = page[page.index(f'id="promoted-nightly-{night}"') :]
        cells = [c.split(">", 1)[1].split("<")[0] for c in row[: row.index("</tr>")].split("<td")[1:]]
        assert cells == ["nightly", night, "sft-a", "f1", "0.5000", "4", "0.3750", "2"]
    row = page[page.index('id="promoted-nightly-start"') :]
    cells = [c.split(">", 1)[1].split("<")[0] for c in row[: row.index("</tr>")].split("<td")[1:]]
    assert cells == ["nightly", "start", "embedded", "f1", "0.1250", "4", "0.0000", "2"]
    figure = page[page.index('id="plot-flywheel" data-metrics=\'') + len('id="plot-flywheel" data-metrics=\'') :]
    points = json.loads(figure[: figure.index("'")])
    assert [(p["night"], p["valid"], p["test"]) for p in points] == [
        ("start", 0.125, 0.0),
        ("2026-11-01", 0.5, 0.375),
        ("2026-11-02", 0.5, 0.375),
    ]


def test_an_empty_warehouse_says_how_nights_come(tmp_path):
    page = TestClient(create_app(Warehouse(tmp_path / "wh"))).get("/flywheel").text
    assert 'id="no-nights"' in page and "nightly" in page
    assert json.dumps("Flywheel")[1:-1] in page
