"""The Train form drawn from each method's declared options, its checks, and a training's curves,
over a hand-written warehouse: build ``b1`` (one SFT example, one preference pair), model
``sft-m1`` trained on it from ``embedded`` by flow run ``RUN`` and evaluated beside its base on
three questions. Prefect is replaced at the dashboard's seam (``Dashboard.prefect``) by a stand-in
that records what would be submitted and returns the log lines a run wrote.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from fastapi.testclient import TestClient

from ragfactory.dashboard import curves, train_form
from ragfactory.dashboard.app import create_app
from ragfactory.warehouse.runs import record_run
from ragfactory.warehouse.store import Warehouse

T0 = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.UTC)
RUN = "0b6f3c1e-0000-4000-8000-0000000000aa"
TURN = [{"role": "user", "content": "Who wrote Jaws?"}, {"role": "assistant", "content": "Peter Benchley"}]
# the trainer's lines (tasks/training/progress.py) as a retried run logs them: step 2 twice
LINES = [
    "prefect settings: home=/tmp",
    "sft-m1: training from step 0 to 3",
    "sft-m1: step 1/3 (33%) loss 2.5000 lr 2.00e-05 eta ?",
    "sft-m1: step 2/3 (67%) loss 9.9000 lr 1.33e-05 eta 00m04s",
    "sft-m1: training from step 1 to 3",
    "sft-m1: step 2/3 (67%) loss 2.0000 lr 1.33e-05 eta 00m04s",
    "sft-m1: step 3/3 (100%) loss 1.5000 lr 6.67e-06 eta 00m00s",
]


class StandIn:
    """Prefect as the dashboard calls it: the deployment's config, submit, logs, flow runs held."""

    def __init__(self, deployment: dict | None = None):
        self.deployment = deployment or {}
        self.submitted: list[tuple] = []

    def default_config(self, method):
        return {"method": method, "run_id": None, **self.deployment}

    def submit(self, method, config, job_variables):
        self.submitted.append((method, config, job_variables))
        return RUN

    def flow_run_url(self, flow_run_id):
        return f"http://prefect.example/runs/flow-run/{flow_run_id}"

    def log_messages(self, flow_run_id):
        return LINES if flow_run_id == RUN else []

    def state(self, flow_run_id):
        return {"state": "Completed", "type": "COMPLETED", "message": None, "final": True, "progress": LINES[-1]}

    def existing_flow_runs(self, ids):
        return {i for i in ids if i == RUN}


def _eval(model_id: str, question: str, f1: float) -> dict:
    return {"eval_id": f"{model_id}-{question}", "run_id": f"eval-{model_id}", "model_id": model_id} | {
        "dataset": "hotpotqa",
        "mode": "direct",
        "question_id": question,
        "f1": f1,
        "em": 0.0,
        "created_at": T0,
    }


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("train-form") / "wh")
    record_run(wh, "b1", "build", "completed", {}, "h1", T0)
    record_run(wh, "train-sft-m1", "train", "completed", {}, "sft-m1", T0, flow_run_id=RUN)
    wh.write("sft_examples", [{"example_id": "e1", "run_id": "b1", "messages": TURN}], shard="decex-0000")
    pair = {"pair_id": "p1", "run_id": "b1", "prompt": TURN[:1], "chosen": TURN[1:], "rejected": TURN[1:]}
    wh.write("preference_pairs", [pair], shard="decex-0000")
    model = {"model_id": "sft-m1", "run_id": "sft-m1", "method": "sft", "base_model": "embedded", "created_at": T0}
    wh.write("models", [model | {"lineage": json.dumps({"run_id": "b1", "table": "sft_examples"})}], shard="sft-m1")
    # trained minus base: q1 0.5 - 0.25, q2 0 - 1, q3 1 - 1; q4 only the base answered
    scores = {"q1": (0.5, 0.25), "q2": (0.0, 1.0), "q3": (1.0, 1.0)}
    wh.write("evals", [_eval("sft-m1", q, trained) for q, (trained, _) in scores.items()], shard="e")
    base = [_eval("embedded", q, base) for q, (_, base) in scores.items()] + [_eval("embedded", "q4", 0.5)]
    wh.write("evals", base, shard="e")
    return wh


def _client(warehouse, prefect=None) -> TestClient:
    app = create_app(warehouse)
    app.state.dashboard.prefect = prefect
    return TestClient(app)


def _defaults(method: str) -> dict:
    return {o.key: o.default for _, group in train_form.form_groups(method) for o in group}


def test_sft_fields_are_the_run_trl_and_lora_options_with_their_defaults():
    assert _defaults("sft") == {
        "base_model": "embedded",
        "name": None,
        "more_run_ids": [],
        "seed": 0,
        "save_steps": 50,
        "allow_downloads": False,
        "trl.max_steps": -1,
        "trl.num_train_epochs": 3.0,
        "trl.learning_rate": 2e-5,  # SFTConfig's
        "trl.per_device_train_batch_size": 2,  # the spec's micro-batches of 2, 4 a step
        "trl.gradient_accumulation_steps": 4,
        "trl.completion_only_loss": True,
        "trl.max_length": 2048,
        "lora.enabled": False,
        "lora.r": 16,
        "lora.alpha": 32,
        "lora.dropout": 0.05,
        "options.trackers": [],
    }


def test_dpo_and_agentic_grpo_fields_add_their_own():
    dpo = _defaults("dpo")
    assert {k: dpo[k] for k in ("trl.learning_rate", "trl.beta", "trl.max_length", "trl.precompute_ref_log_probs")} == {
        "trl.learning_rate": 1e-6,
        "trl.beta": 0.1,
        "trl.max_length": 1024,
        "trl.precompute_ref_log_probs": True,
    }
    agentic = _defaults("grpo-agentic")
    assert [k for k in agentic if k.startswith("options.")] == [
        "options.max_turns",
        "options.top_k",
        "options.retriever",
        "options.sources",
        "options.grammar",
        "options.turn_tokens",
        "options.metric",
        "options.prm_model",
        "options.prm_aggregate",
        "options.trackers",
    ]
    assert (agentic["rewards"], agentic["task"], agentic["options.max_turns"]) == (["answer_f1", "format"], None, 4)
    assert "rewards" not in dpo and "task" not in dpo


def test_every_field_has_help():
    for method in ("sft", "dpo", "grpo", "grpo-agentic", "tree-advantage", "prm"):
        unhelped = [o.key for _, group in train_form.form_groups(method) for o in group if not o.help]
        assert unhelped == [], method


def test_only_fields_off_their_defaults_are_sent():
    form = {"fields_of": "sft", "trl.max_steps": "-1", "trl.learning_rate": "2e-05", "trl.completion_only_loss": "on"}
    assert train_form.submitted("sft", form | {"base_model": "embedded", "seed": ""}) == {}
    changed = form | {"trl.max_steps": "2", "lora.enabled": "on", "more_run_ids": "b0, b00", "lora.r": "8"}
    del changed["trl.completion_only_loss"]  # unticked
    assert train_form.submitted("sft", changed) == {
        "trl": {"max_steps": 2, "completion_only_loss": False},
        "lora": {"enabled": True, "r": 8},
        "more_run_ids": ["b0", "b00"],
    }
    assert train_form.submitted("dpo", changed) == {}  # the fields of another method: the JSON box alone


@pytest.mark.parametrize(
    "key,typed,message",
    [
        ("trl.max_steps", "two", "trl.max_steps: 'two' is not an integer"),
        ("trl.max_steps", "1.5", "trl.max_steps: '1.5' is not an integer"),
        ("trl.learning_rate", "-0.1", "trl.learning_rate: -0.1 is below its minimum 0"),
        ("trl.max_steps", "-2", "trl.max_steps: -2 is below its minimum -1"),
        ("save_steps", "0", "save_steps: 0 is below its minimum 1"),
    ],
)
def test_a_refused_value_names_its_field(key, typed, message):
    with pytest.raises(ValueError) as refused:
        train_form.submitted("sft", {"fields_of": "sft", "trl.completion_only_loss": "on", key: typed})
    assert str(refused.value) == message and train_form.refused_key(message) == key


def test_a_choice_outside_the_declared_ones_is_refused():
    form = {"fields_of": "grpo-agentic", "options.retriever": "grep"}
    with pytest.raises(ValueError, match=r"^options.retriever: 'grep' is not one of bm25, dense$"):
        train_form.submitted("grpo-agentic", form)


def test_the_page_draws_a_field_per_option_with_the_deployments_values(warehouse):
    prefect = StandIn({"trl": {"max_steps": 20, "logging_steps": 5}})
    page = _client(warehouse, prefect).get("/train", params={"run": "b1", "method": "sft"}).text
    assert '<input type="number" id="opt-trl-max_steps" name="trl.max_steps" value="20" step="1" min="-1">' in page
    assert 'name="trl.learning_rate" value="2e-05" step="any" min="0"' in page
    assert '<input type="checkbox" id="opt-trl-completion_only_loss" name="trl.completion_only_loss" checked>' in page
    assert "int, default -1" in page and "Optimizer steps to train" in page
    box = re.search(r'<textarea name="config" id="config"[^>]*>(.*?)</textarea>', page, re.S).group(1)
    assert json.loads(box.replace("&#34;", '"')) == {"trl": {"logging_steps": 5}}  # what no field holds


def test_a_refused_field_is_named_and_marked_and_nothing_is_submitted(warehouse):
    prefect = StandIn()
    form = {"run": "b1", "method": "dpo", "fields_of": "dpo", "trl.max_steps": "ten", "config": "{}"}
    response = _client(warehouse, prefect).post("/train", data=form)
    assert response.status_code == 400 and prefect.submitted == []
    assert "trl.max_steps: &#39;ten&#39; is not an integer" in response.text
    assert '<div class="option invalid" data-key="trl.max_steps">' in response.text
    assert 'name="trl.max_steps" value="ten"' in response.text  # kept as typed


def test_the_fields_and_the_box_make_the_submitted_config(warehouse):
    prefect = StandIn()
    form = {"run": "b1", "method": "sft", "fields_of": "sft", "trl.completion_only_loss": "on"}
    form |= {"trl.max_steps": "2", "trl.learning_rate": "0.0001", "lora.enabled": "on"}
    form |= {"config": '{"trl": {"logging_steps": 1}, "lora": {"r": 4}}', "job_variables": "{}"}
    response = _client(warehouse, prefect).post("/train", data=form, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == f"/train/runs/{RUN}"
    [(method, config, jobs)] = prefect.submitted
    assert (method, jobs) == ("sft", {})
    assert config == {
        "method": "sft",
        "run_id": "b1",
        "trl": {"max_steps": 2, "learning_rate": 0.0001, "logging_steps": 1},
        "lora": {"enabled": True, "r": 4},
        "warehouse": {"root": warehouse.location},
    }


def test_steps_logged_twice_keep_the_later_line():
    assert curves.logged_steps(LINES) == {
        1: {"loss": 2.5, "lr": 2e-5},
        2: {"loss": 2.0, "lr": 1.33e-5},
        3: {"loss": 1.5, "lr": 6.67e-6},
    }
    grpo = curves.logged_steps(["g: step 1/1 (100%) loss 0.0100 lr 1.00e-06 eta 00m00s reward 0.75 kl 0.002"])
    assert grpo == {1: {"loss": 0.01, "lr": 1e-6, "reward": 0.75, "kl": 0.002}}
    assert [title for title, _ in curves.series(grpo)] == ["loss", "learning rate", "reward", "KL"]


def test_the_run_page_curves_have_a_point_per_logged_step_and_the_eval_delta(warehouse):
    svg = _client(warehouse, StandIn()).get(f"/train/runs/{RUN}/curves").text
    loss = svg[svg.index('id="curve-loss"') : svg.index("</figure>", svg.index('id="curve-loss"'))]
    assert re.findall(r"<title>(step [^<]*)</title>", loss) == ["step 1: 2.5", "step 2: 2", "step 3: 1.5"]
    assert 'id="curve-learning-rate"' in svg and 'id="curve-reward"' not in svg
    delta = svg[svg.index('id="curve-f1-delta-vs-base-hotpotqa-direct"') :]
    # sorted: q2 -1, q3 0, q1 0.25; q4 was answered by the base alone
    assert re.findall(r"<title>([^<]*)</title>", delta) == ["question 1: -1", "question 2: 0", "question 3: 0.25"]
    empty = _client(warehouse, StandIn()).get("/train/runs/0b6f3c1e-0000-4000-8000-0000000000bb/curves").text
    assert empty == '<p class="empty" id="no-curves">no step logged yet</p>'


def test_the_models_page_links_a_model_to_its_runs_curves(warehouse):
    page = _client(warehouse, StandIn()).get("/models").text
    row = page[page.index('id="model-sft-m1"') :]
    assert f'<a class="curves-link" href="/train/runs/{RUN}">' in row[: row.index("</tr>")]
    held_elsewhere = _client(warehouse, None).get("/models").text
    assert "curves-link" not in held_elsewhere and "its flow run is not on this Prefect server" in held_elsewhere


def test_the_curves_read_the_lines_the_trainer_writes():
    """GRPO's reward and KL ride on the step line (tasks/training/progress.py) the curves parse."""
    import logging
    from types import SimpleNamespace

    from ragfactory.tasks.training.progress import LossLogger

    class Lines(logging.Handler):
        messages: list[str] = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    logger, lines = logging.getLogger("curve-lines"), Lines()
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    callback = LossLogger(logger, prefix="grpo-m: ")
    callback.on_train_begin(None, SimpleNamespace(global_step=0, max_steps=2), None)
    for step, logs in (
        (1, {"loss": 0.01, "learning_rate": 1e-6, "reward": 0.75, "kl": 0.002}),
        (2, {"loss": 0.02, "learning_rate": 5e-7, "reward": 1.0}),
    ):
        callback.on_log(None, SimpleNamespace(global_step=step, max_steps=2), None, logs=logs)
    assert curves.logged_steps(lines.messages) == {
        1: {"loss": 0.01, "lr": 1e-6, "reward": 0.75, "kl": 0.002},
        2: {"loss": 0.02, "lr": 5e-7, "reward": 1.0},
    }
