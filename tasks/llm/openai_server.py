"""An OpenAI-compatible chat server in front of any generation backend (FastAPI + uvicorn).

It serves ``POST /v1/chat/completions`` (non-streaming) and ``GET /v1/models``, so the
``openai`` backend, or any OpenAI client, can generate with a model that only our own backends
run, such as the embedded SmolLM2 on CPU::

    python -m ragfactory.tasks.llm.openai_server --model embedded --port 8000

Requests that arrive together, or while the engine is busy, are coalesced into one
``generate_batch`` call (the batching of docs/architecture.md, "Core contracts"), so concurrent
clients share the engine's forward passes. The server keeps no cache: recording calls is the
client's business.

A request may carry vLLM's ``"structured_outputs": {"grammar": …}`` (llguidance's Lark dialect):
the grammar is checked when the request arrives (HTTP 400 naming the problem) and the backend
holds the completion to it.

Test doubles are not served from here: ``tests/echo_server.py`` runs this app over a
deterministic echo backend and wraps it to fail or stall on purpose (``python -m
tests.echo_server`` from the checkout), for testing clients' retries, timeouts and interrupts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ragfactory.tasks.llm.structured import check_grammar
from ragfactory.tasks.llm.types import Backend, Completion, Grammar, Message, Request, Sampling


@dataclass(frozen=True)
class ServerConfig:
    """What the server answers to and how it batches."""

    model_name: str
    default_max_tokens: int = 256  # Sampling's default, for clients that send no max_tokens
    max_batch: int = 64  # requests coalesced into one engine call
    batch_window_s: float = 0.01  # wait after a batch's first request, so a burst joins it
    api_key_env: str | None = None  # require `Authorization: Bearer $NAME` when set


class ChatMessage(BaseModel):
    role: str
    content: str | list[dict] | None = None  # a list holds content parts; text parts are joined

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatCompletionBody(BaseModel):
    """The fields of an OpenAI chat-completions request that we honour; others are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    n: int = Field(1, ge=1)
    temperature: float = Field(1.0, ge=0.0)  # OpenAI's default
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None  # absent means seed 0: this server is reproducible by default
    stream: bool = False
    # vLLM's field for constrained decoding; we honour its "grammar" (llguidance's Lark dialect)
    structured_outputs: dict[str, Any] | None = None

    def grammar(self) -> Grammar | None:
        """The request's output grammar; another kind of structured output is refused by name."""
        if not self.structured_outputs:
            return None
        unknown = sorted(set(self.structured_outputs) - {"grammar"})
        text = self.structured_outputs.get("grammar")
        if unknown or not isinstance(text, str) or not text.strip():
            raise ValueError(
                f"structured_outputs: only a non-empty 'grammar' (llguidance Lark) is "
                f"supported, got {sorted(self.structured_outputs)}"
            )
        grammar = Grammar("request", text)
        check_grammar(grammar)
        return grammar

    def to_request(self, default_max_tokens: int) -> Request:
        stop = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        sampling = Sampling(
            n=self.n,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_completion_tokens or self.max_tokens or default_max_tokens,
            stop=tuple(stop),
            seed=self.seed or 0,
            grammar=self.grammar(),
        )
        return Request(tuple(Message(m.role, m.text()) for m in self.messages), sampling)


class BatchQueue:
    """Coalesces concurrent requests into one ``generate_batch`` call in a worker thread.

    Not the project's ``Batcher``: that one records every completion in a call cache, which a
    long-running server would grow without bound; caching is the client's business here.
    """

    def __init__(self, backend: Backend, max_batch: int, window_s: float = 0.0) -> None:
        self.backend = backend
        self.max_batch = max_batch
        self.window_s = window_s
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None

    async def generate(self, request: Request) -> list[Completion]:
        if self._worker is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run())
        future = asyncio.get_running_loop().create_future()
        await self._queue.put((request, future))
        return await future

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            await asyncio.sleep(self.window_s)
            while not self._queue.empty() and len(batch) < self.max_batch:
                batch.append(self._queue.get_nowait())
            try:
                results = await asyncio.to_thread(self.backend.generate_batch, [r for r, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"backend answered {len(results)} of {len(batch)} requests")
            except Exception as exc:  # every waiter of the failed batch gets the error
                results = [exc] * len(batch)
            for (_, future), result in zip(batch, results):
                if future.done():
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)


def create_app(backend: Backend, config: ServerConfig) -> FastAPI:
    """The FastAPI app serving ``backend`` under ``config.model_name``."""
    app = FastAPI(title="ragfactory OpenAI-compatible server")
    queue = BatchQueue(backend, config.max_batch, config.batch_window_s)

    @app.get("/v1/models")
    async def list_models(http: HttpRequest):
        if (denied := _check_key(http, config)) is not None:
            return denied
        card = {"id": config.model_name, "object": "model", "created": 0, "owned_by": "ragfactory"}
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionBody, http: HttpRequest):
        if (denied := _check_key(http, config)) is not None:
            return denied
        if body.model != config.model_name:
            return error_response(404, f"model {body.model!r} does not exist; serving {config.model_name!r}")
        if body.stream:
            return error_response(400, "streaming is not supported")
        try:
            request = body.to_request(config.default_max_tokens)
        except ValueError as exc:  # a grammar that does not compile: the client's to fix
            return error_response(400, str(exc))
        try:
            completions = await queue.generate(request)
        except Exception as exc:
            return error_response(500, f"{type(exc).__name__}: {exc}")
        return _response(config.model_name, completions)

    return app


def _check_key(http: HttpRequest, config: ServerConfig) -> JSONResponse | None:
    if not config.api_key_env:
        return None
    expected = os.environ.get(config.api_key_env, "")
    if not expected or http.headers.get("authorization") != f"Bearer {expected}":
        return error_response(401, "invalid or missing API key")
    return None


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    """An OpenAI-style error body with ``status``."""
    body = {"error": {"message": message, "type": "error", "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


def _response(model: str, completions: list[Completion]) -> dict:
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": c.text},
            "finish_reason": c.finish_reason,
        }
        for i, c in enumerate(completions)
    ]
    prompt_tokens = completions[0].prompt_tokens if completions else 0
    completion_tokens = sum(c.completion_tokens for c in completions)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def load_backend(model: str, cache_dir: Path | None = None) -> Backend:
    """``embedded`` (the shipped SmolLM2, converted under ``cache_dir``, by default the
    warehouse's ``artifacts/models``) or a local checkpoint folder."""
    from ragfactory.tasks.llm.embedded import embedded_model_path, is_embedded
    from ragfactory.tasks.llm.transformers_backend import TransformersBackend
    from ragfactory.warehouse.store import Warehouse

    if is_embedded(model):
        path = embedded_model_path(cache_dir or Warehouse().artifacts_dir("models"))
    else:
        path = Path(model)
    backend = TransformersBackend(str(path))
    backend.load()  # before the server reports ready, not inside the first request
    return backend


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The server's command line; a wrapper adds its own options to it."""
    parser = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded", help="embedded or a checkpoint folder")
    parser.add_argument("--served-name", default=None, help="model id clients send (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--cache-dir", type=Path, default=None, help="where the embedded model is converted")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--api-key-env", default=None, help="require this variable's value as bearer key")
    return parser


def server_config(args: argparse.Namespace) -> ServerConfig:
    """The ``ServerConfig`` of parsed command-line ``args``."""
    return ServerConfig(
        model_name=args.served_name or args.model, max_batch=args.max_batch, api_key_env=args.api_key_env
    )


def serve(app, host: str, port: int) -> None:
    """Run an ASGI ``app`` (this module's, or one wrapping it) until interrupted."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    serve(create_app(load_backend(args.model, args.cache_dir), server_config(args)), args.host, args.port)


if __name__ == "__main__":
    main()
