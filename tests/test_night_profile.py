"""The stack classifier of benchmarks/night_profile.py: py-spy's raw stacks parsed and each sent to
the phase of its innermost matching frame. No profiler, no model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "night_profile.py"
_spec = importlib.util.spec_from_file_location("night_profile", SCRIPT)
night_profile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(night_profile)

SITE = "/venv/lib/python3.11/site-packages"
BACKEND = ("TransformersBackend._decode", "/repo/tasks/llm/transformers_backend.py")  # as py-spy names it
STRATEGY = ("expand", "/repo/tasks/search/decex/strategy.py")


def test_innermost_matching_frame_decides():
    forward = ("forward", f"{SITE}/torch/nn/modules/linear.py")
    prefill = ("_pass", "/repo/tasks/llm/prefill.py")
    sample = ("sample_tokens", "/repo/tasks/llm/sampling.py")
    mask = ("mask_logits", "/repo/tasks/llm/structured.py")
    stop = ("_decode", f"{SITE}/transformers/tokenization_utils_base.py")  # the tokenizer's _decode
    assert night_profile.classify([STRATEGY, BACKEND, prefill, forward]) == "prefill"
    assert night_profile.classify([STRATEGY, BACKEND, forward]) == "decode"
    assert night_profile.classify([STRATEGY, ("_decode", BACKEND[1]), forward]) == "decode"
    assert night_profile.classify([STRATEGY, BACKEND, sample]) == "sampling"
    assert night_profile.classify([STRATEGY, BACKEND, mask]) == "grammar masks"
    assert night_profile.classify([STRATEGY, BACKEND, stop]) == "tokenisation"
    assert night_profile.classify([STRATEGY, ("sorted", "<builtin>")]) == "strategy Python"
    assert night_profile.classify([STRATEGY, ("search", "/repo/tasks/retrieval/bm25.py")]) == "retrieval"
    assert night_profile.classify(
        [("run", f"{SITE}/prefect/engine.py"), ("write", f"{SITE}/pyarrow/parquet/core.py")]
    ) == ("warehouse")
    assert night_profile.classify([("run", f"{SITE}/prefect/engine.py")]) == "Prefect"
    assert night_profile.classify([("main", "/usr/lib/python3.11/threading.py")]) == "other"


def test_raw_lines_parse_and_tally():
    raw = (
        'process 7:"/venv/bin/python ragfactory build";main (/repo/cli.py:3);_decode '
        "(/repo/tasks/llm/transformers_backend.py:210);forward (/site-packages/torch/nn/modules/linear.py:125) 12\n"
        'process 9:"uvicorn prefect";serve (/site-packages/prefect/server/api/server.py:40) 3\n'
        "garbage line\n"
    )
    stacks = night_profile.parse_raw(raw)
    assert [count for _, count in stacks] == [12, 3]
    assert stacks[0][0][0] == ('"/venv/bin/python ragfactory build"', night_profile.PROCESS)
    assert stacks[0][0][2] == ("_decode", "/repo/tasks/llm/transformers_backend.py")
    phases, functions = night_profile.tally(stacks)
    assert phases == {"decode": 12, "Prefect": 3}  # uvicorn's own frames too, by its process
    assert night_profile.classify(
        [('"uvicorn prefect.server"', night_profile.PROCESS), ("run", f"{SITE}/anyio/x.py")]
    ) == ("Prefect")
    assert functions.most_common(1)[0] == ("forward (torch/nn/modules/linear.py)", 12)


def test_phase_rows_share_user_time_by_samples_and_add_system_time():
    usage = {"user_s": 90.0, "system_s": 10.0}
    rows = night_profile.phase_rows(night_profile.Counter({"decode": 3, "prefill": 1}), usage, rate=10)
    by_phase = {row["phase"]: row for row in rows}
    assert by_phase["decode"]["cpu_s"] == 67.5 and by_phase["prefill"]["cpu_share"] == 0.225
    assert by_phase[night_profile.SYSTEM]["cpu_share"] == 0.1
    assert sum(row["cpu_share"] for row in rows) == pytest.approx(1.0)


def test_prefilled_tokens_sum_the_shards_engine_lines():
    log = "a: engine {'rows': 8, 'prompt_tokens': 1304, 'prefilled_tokens': 745}\nb: engine {'prefilled_tokens': 55}\n"
    assert night_profile.prefilled_tokens(log) == 800
    assert night_profile.prefilled_tokens("no engine line") is None
