"""vLLM's async engine (``AsyncLLM``) as a continuous backend: the ``vllm`` engine's default.

The configuration, sampling parameters and outputs are ``tasks/llm/vllm_backend.py``'s, shared
with the offline engine; this module adds the engine loop that the scheduler's calls, from every
shard's event loop, submit to.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from ragfactory.tasks.llm.types import Completion, Request
from ragfactory.tasks.llm.vllm_backend import (
    VLLMConfig,
    engine_args,
    engine_tokenizer_id,
    import_vllm,
    sampling_kwargs,
    sampling_params,
    to_completions,
    vllm_fingerprint,
)


class VLLMAsyncBackend:
    """Generates with vLLM's ``AsyncLLM``: a continuous engine (``ContinuousBackend``).

    The engine lives on an event loop of its own, in a thread of its own: ``AsyncLLM`` binds its
    output handler to the loop that first generates, while its callers are the batchers of every
    shard this process runs, each on its own loop. ``agenerate_batch`` submits each request there
    at once and awaits all of them; cancelling it aborts them in the engine. ``engine`` passes an
    engine already built (a fake in tests), ``make_params`` what builds sampling parameters.

    Its blind spot: a request's sequences join whatever batch the engine is running, so in
    bfloat16 a greedy sample may differ by batch composition, as the offline engine's may.
    """

    continuous = True

    def __init__(self, config: VLLMConfig, engine: Any = None, make_params: Callable[..., Any] | None = None):
        self.config = config
        self.fingerprint = vllm_fingerprint(config)
        self._engine = engine
        self._make_params = make_params
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Lock()
        self._ids = itertools.count()
        self._tokenizer_id: str | None = None  # of the engine's tokenizer, read with the first answer

    def __repr__(self) -> str:
        return f"VLLMAsyncBackend(model={self.config.model!r}, fingerprint={self.fingerprint!r})"

    @property
    def engine(self) -> Any:
        """The engine, built (with its loop) on first use, as ``VLLMBackend.llm`` is."""
        self._engine_loop()
        return self._engine

    async def agenerate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        if not requests:
            return []
        loop = self._loop or await asyncio.to_thread(self._engine_loop)
        future = asyncio.run_coroutine_threadsafe(self._generate_all(requests), loop)
        return await asyncio.wrap_future(future)

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        """The same, for a caller without an event loop (a script, a lock-step path)."""
        if not requests:
            return []
        future = asyncio.run_coroutine_threadsafe(self._generate_all(requests), self._engine_loop())
        return future.result()

    def close(self) -> None:
        """Stop the engine (its core process) and its loop."""
        with self._started:
            loop, self._loop = self._loop, None
            engine, self._engine = self._engine, None
            if engine is not None and hasattr(engine, "shutdown"):
                engine.shutdown()  # now, while the interpreter is whole, not in AsyncLLM.__del__
            if loop is not None:
                loop.call_soon_threadsafe(loop.stop)

    def _engine_loop(self) -> asyncio.AbstractEventLoop:
        with self._started:
            if self._loop is None:
                if self._engine is None:
                    self._engine = build_async_engine(self.config)
                    # Stopped at exit while the interpreter is whole; left to AsyncLLM.__del__,
                    # the engine's shutdown fails in interpreter teardown.
                    atexit.register(self.close)
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="vllm-async-engine", daemon=True).start()
                self._loop = loop
            return self._loop

    async def _generate_all(self, requests: list[Request]) -> list[list[Completion]]:
        return list(await asyncio.gather(*(self._generate(r) for r in requests)))

    async def _generate(self, request: Request) -> list[Completion]:
        make_params = self._make_params or sampling_params
        params = make_params(**sampling_kwargs(request.sampling), final_only=True)
        prompt = {"prompt_token_ids": chat_prompt_ids(self._engine, request)}
        started = time.perf_counter()
        final = None
        async for output in self._engine.generate(prompt, params, f"ragfactory-{next(self._ids)}"):
            final = output
        if final is None or not final.finished:
            raise RuntimeError(f"vllm ended request {request.role!r} without a final output")
        if self._tokenizer_id is None:
            self._tokenizer_id = engine_tokenizer_id(self._engine)
        return to_completions(final, time.perf_counter() - started, self._tokenizer_id)


def chat_prompt_ids(engine: Any, request: Request) -> list[int]:
    """The token ids ``LLM.chat`` would send: the chat template with the generation prompt,
    rendered as text and tokenised without adding special tokens again."""
    tokenizer = engine.get_tokenizer()
    text = tokenizer.apply_chat_template(request.messages_json(), tokenize=False, add_generation_prompt=True)
    return list(tokenizer.encode(text, add_special_tokens=False))


def build_async_engine(config: VLLMConfig) -> Any:
    """A ``vllm.AsyncLLM`` for ``config``; clear error when vllm is not installed."""
    vllm = import_vllm()
    from vllm.config import StructuredOutputsConfig
    from vllm.v1.engine.async_llm import AsyncLLM

    args = engine_args(config)  # vllm.LLM makes its configs from dicts; the engine args do not
    args["structured_outputs_config"] = StructuredOutputsConfig(**args["structured_outputs_config"])
    return AsyncLLM.from_engine_args(vllm.AsyncEngineArgs(**args, disable_log_stats=True))
