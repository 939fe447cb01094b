"""A backend for any OpenAI-compatible chat server: vLLM, SGLang, llama.cpp or a hosted API.

The engine contract of docs/architecture.md, "Core contracts": one ``generate_batch`` call answers a whole
batch, here by sending every request at once over async HTTP under a concurrency bound, so the
server's own continuous batching sees the batch. It is a ``ContinuousBackend`` (unless
``continuous: false``): the scheduler hands it each request as soon as a question issues it. Calls go to ``POST {base_url}/chat/completions``
(non-streaming) with model, messages, n, temperature, top_p, max_tokens, stop and seed, and a
constrained request's grammar as vLLM's server takes it: ``"structured_outputs": {"grammar":
<Lark text>}`` (vLLM picks its guidance backend for llguidance's Lark; ``openai_server`` honours
the same field). A server that refuses the field fails the request with an error that names the
server and ``llm.<role>.structured: false``, the switch that sends requests without it.

Failures that say "try again" (HTTP 429, any 5xx, a connection error or a timeout) are retried
with exponential backoff and jitter, honouring ``Retry-After``; other 4xx answers fail at once.
The API key is read from an environment variable when the backend is built (absent is fine for a
local server) and is kept out of ``repr`` and of every error message.

Usage is reported per request, not per choice: each completion carries the request's
``prompt_tokens`` (every sample is conditioned on the whole prompt), and the request's
``completion_tokens`` are split across the choices in proportion to their text length, so the
sum over the choices equals what the server billed. ``latency_s`` is the wall time of the
request including retries, the same for each of its choices.

The fingerprint hashes the engine name and the model name only, not ``base_url``: two servers
that serve the same model share a cache. A remote server cannot promise identical weights; set
``revision`` when the weights behind a model name change, to start a new cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from ragfactory.tasks.llm.types import Completion, Request

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class OpenAIConfig:
    """Where the server is and how hard to push it."""

    model: str
    base_url: str = "http://127.0.0.1:8000/v1"  # `vllm serve` and openai_server listen here
    api_key_env: str = "OPENAI_API_KEY"  # the name of the variable, never the key itself
    revision: str = ""  # part of the fingerprint: bump it when the served weights change
    max_concurrency: int = 32  # enough to fill a server's batch without flooding a hosted API
    timeout_s: float = 300.0  # a long generation on a busy CPU server takes minutes
    connect_timeout_s: float = 10.0  # a server that does not accept in 10 s is down
    max_retries: int = 5  # with backoff this waits ~30 s in all before giving up
    backoff_s: float = 0.5  # first retry delay; doubles each attempt
    backoff_max_s: float = 20.0  # cap per delay, also on a server's Retry-After
    # Hand each request over as soon as a question issues it (the server batches in-flight
    # sequences at every step); false: the scheduler's lock-step batches, one call at a time.
    continuous: bool = True
    # Ask for each sampled token's log-probability (the standard ``logprobs`` field): kept in
    # llm_calls.completion_logprobs, so a trainer has the behaviour policy's (docs/tokens.md).
    logprobs: bool = True
    # Ask for the prompt's and completion's token ids (vLLM's ``return_token_ids``); off by
    # default because hosted APIs refuse fields they do not know.
    token_ids: bool = False

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("OpenAIConfig.model: empty model name")
        if self.max_concurrency < 1:
            raise ValueError(f"OpenAIConfig.max_concurrency: {self.max_concurrency} < 1")
        if self.max_retries < 0:
            raise ValueError(f"OpenAIConfig.max_retries: {self.max_retries} < 0")


class OpenAIBackendError(RuntimeError):
    """A request the server did not answer; the message names the request and the cause."""


def openai_fingerprint(model: str, revision: str = "") -> str:
    """The cache identity of a served model: engine and model name, not the server's address."""
    payload = json.dumps({"engine": "openai", "model": model, "revision": revision}, sort_keys=True)
    return f"openai/{model}/{hashlib.sha256(payload.encode()).hexdigest()[:16]}"


def request_body(
    model: str,
    request: Request,
    n: int | None = None,
    seed: int | None = None,
    logprobs: bool = False,
    token_ids: bool = False,
) -> dict:
    """The chat-completions JSON body of one request (``n`` / ``seed`` override the request's;
    ``logprobs`` / ``token_ids`` ask for the sampled tokens' log-probs and the token ids)."""
    s = request.sampling
    body = {
        "model": model,
        "messages": request.messages_json(),
        "n": s.n if n is None else n,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "max_tokens": s.max_tokens,
        "seed": s.seed if seed is None else seed,
    }
    if s.stop:
        body["stop"] = list(s.stop)
    if s.grammar is not None:
        body["structured_outputs"] = {"grammar": s.grammar.text}
    if logprobs:
        body["logprobs"] = True
    if token_ids:
        body["return_token_ids"] = True
    return body


def split_tokens(total: int, texts: list[str]) -> list[int]:
    """Split a request's completion-token total across its choices by text length.

    Largest-remainder rounding keeps the sum exact; empty texts get no tokens unless all are.
    """
    if not texts:
        return []
    weights = [len(t) for t in texts]
    if sum(weights) == 0:
        weights = [1] * len(texts)
    shares = [total * w / sum(weights) for w in weights]
    counts = [int(x) for x in shares]
    by_remainder = sorted(range(len(texts)), key=lambda i: counts[i] - shares[i])
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def parse_choices(payload: dict, latency_s: float) -> list[Completion]:
    """Completions from one chat-completions response, ordered by choice index."""
    choices = sorted(payload.get("choices") or [], key=lambda c: c.get("index", 0))
    texts = [((c.get("message") or {}).get("content") or "") for c in choices]
    usage = payload.get("usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens") or 0)
    counts = split_tokens(int(usage.get("completion_tokens") or 0), texts)
    prompt_ids = _ints(payload.get("prompt_token_ids"))
    return [
        Completion(
            text=text,
            finish_reason=str(choice.get("finish_reason") or "unknown"),
            prompt_tokens=prompt_tokens,
            completion_tokens=count,
            latency_s=latency_s,
            prompt_token_ids=prompt_ids,
            completion_token_ids=_ints(choice.get("token_ids")),
            completion_logprobs=choice_logprobs(choice),
        )
        for choice, text, count in zip(choices, texts, counts)
    ]


def choice_logprobs(choice: dict) -> tuple[float, ...] | None:
    """The sampled tokens' log-probabilities a choice carries (``logprobs.content[*].logprob``),
    as the server computed them; None when it sent none."""
    content = (choice.get("logprobs") or {}).get("content")
    if not content or any(entry.get("logprob") is None for entry in content):
        return None
    return tuple(float(entry["logprob"]) for entry in content)


def _ints(values) -> tuple[int, ...] | None:
    return None if values is None else tuple(int(v) for v in values)


class OpenAIBackend:
    """Generates through an OpenAI-compatible server; see the module docstring for the details.

    ``transport`` replaces the network (an ``httpx.AsyncBaseTransport``), for tests.
    """

    def __init__(
        self,
        config: OpenAIConfig,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.fingerprint = openai_fingerprint(config.model, config.revision)
        self._api_key = os.environ.get(config.api_key_env) or None
        self._transport = transport
        self._rng = rng or random.Random()
        self.continuous = config.continuous
        self._asks = {"logprobs": config.logprobs, "token_ids": config.token_ids}
        # One bound per event loop (a shard's batcher runs one): its concurrent calls share it.
        self._limits: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        c = self.config
        key = "set" if self._api_key else "unset"
        return f"OpenAIBackend(model={c.model!r}, base_url={c.base_url!r}, api_key={key})"

    __str__ = __repr__

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        """The sync entry point; works from a worker thread and inside a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.agenerate_batch(requests))
        # asyncio.run refuses to nest in a running loop: give the batch a loop of its own.
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, self.agenerate_batch(requests)).result()

    async def agenerate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        """All requests concurrently; at most ``max_concurrency`` in flight on this event loop,
        whatever number of calls it makes at once."""
        if not requests:
            return []
        loop = asyncio.get_running_loop()
        semaphore = self._limits.get(loop)
        if semaphore is None:
            semaphore = self._limits[loop] = asyncio.Semaphore(self.config.max_concurrency)
        try:
            # A TaskGroup cancels the rest of the batch as soon as one request gives up.
            async with self._client() as client, asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._generate(client, semaphore, i, r)) for i, r in enumerate(requests)]
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None
        return [t.result() for t in tasks]

    async def list_models(self) -> list[str]:
        """The model ids the server reports at ``GET {base_url}/models``."""
        async with self._client() as client:
            response = await client.get("/models")
        if response.status_code != 200:
            raise OpenAIBackendError(self._scrub(f"GET /models: HTTP {response.status_code}"))
        return [m["id"] for m in response.json().get("data", [])]

    def _client(self) -> httpx.AsyncClient:
        c = self.config
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        limits = httpx.Limits(max_connections=c.max_concurrency, max_keepalive_connections=c.max_concurrency)
        return httpx.AsyncClient(
            base_url=c.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(c.timeout_s, connect=c.connect_timeout_s),
            limits=limits,
            transport=self._transport,
        )

    async def _generate(
        self, client: httpx.AsyncClient, semaphore: asyncio.Semaphore, index: int, request: Request
    ) -> list[Completion]:
        """The n completions of one request, topping up servers that return fewer choices."""
        n = request.sampling.n
        async with semaphore:
            started = time.perf_counter()
            payload = await self._post(client, index, request_body(self.config.model, request, **self._asks))
        completions = parse_choices(payload, time.perf_counter() - started)[:n]
        # Some servers (llama.cpp) ignore n; sample i then comes from its own seed + i, the
        # seeding the contract promises and vLLM uses for the children of an n > 1 request.
        for i in range(len(completions), n):
            body = request_body(self.config.model, request, n=1, seed=request.sampling.seed + i, **self._asks)
            async with semaphore:
                payload = await self._post(client, index, body)
            extra = parse_choices(payload, time.perf_counter() - started)
            if not extra:
                raise OpenAIBackendError(f"request {index}: the server returned no choices")
            completions.append(extra[0])
        return completions

    async def _post(self, client: httpx.AsyncClient, index: int, body: dict) -> dict:
        """One chat-completions call with retries; raises OpenAIBackendError when it gives up."""
        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            try:
                response = await client.post("/chat/completions", json=body)
            except httpx.TransportError as exc:
                cause, retry_after = _transport_cause(exc), None
            else:
                if response.status_code == 200:
                    return _payload(response, index)
                cause = f"HTTP {response.status_code}: {_error_text(response)}"
                if response.status_code not in RETRY_STATUSES:
                    raise OpenAIBackendError(self._scrub(f"request {index}: {cause}{self._hint(body)}"))
                retry_after = _retry_after(response)
            if attempt + 1 < attempts:
                await asyncio.sleep(self._delay(attempt, retry_after))
        raise OpenAIBackendError(self._scrub(f"request {index}: gave up after {attempts} attempts; last: {cause}"))

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        c = self.config
        if retry_after is not None:
            return min(retry_after, c.backoff_max_s)
        # Jitter spreads the retries of a whole batch that failed at once.
        base = min(c.backoff_s * 2**attempt, c.backoff_max_s)
        return base * (0.5 + 0.5 * self._rng.random())

    def _hint(self, body: dict) -> str:
        if "structured_outputs" not in body:
            return ""
        return (
            f" (the server at {self.config.base_url} may not accept output grammars "
            "(structured_outputs); set llm.<role>.structured: false to generate freely)"
        )

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text


def _payload(response: httpx.Response, index: int) -> dict:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise OpenAIBackendError(f"request {index}: HTTP 200 without a JSON object: {response.text[:200]!r}")
    return payload


def _error_text(response: httpx.Response, limit: int = 300) -> str:
    """The server's error message, short enough for a log line."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:limit]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    detail = data.get("detail") if isinstance(data, dict) else None
    return str(error or detail or response.text)[:limit]


def _transport_cause(exc: httpx.TransportError) -> str:
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection error"
    return f"{type(exc).__name__} ({kind})"


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None
