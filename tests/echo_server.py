"""The project's OpenAI-compatible server (``tasks/llm/openai_server.py``) with test doubles.

Subprocess tests need a real server process that answers deterministically, or fails and stalls
on purpose; those doubles live here, not in the library::

    python -m tests.echo_server --model echo --port 8000 --delay-s 300   # from the checkout root

``--model echo`` serves ``EchoBackend``; any other ``--model`` loads a real one as the library
server does. ``--fail-first N`` fails each distinct request body N times (statuses from
``--fail-status``, cycling, each with ``Retry-After: 0``) and ``--delay-s`` sleeps before each
answer: ``FaultInjection`` does both in front of the unchanged app.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass

from ragfactory.tasks.llm.openai_server import (
    build_parser,
    create_app,
    error_response,
    load_backend,
    serve,
    server_config,
)
from ragfactory.tasks.llm.types import Completion, Request

CHAT_PATH = "/v1/chat/completions"


class EchoBackend:
    """Test backend: sample i answers with the last user message (plus " [i]" for i > 0, so
    samples differ), cut at the first stop string, then at ``max_tokens`` words."""

    fingerprint = "echo"

    def generate_batch(self, requests: list[Request]) -> list[list[Completion]]:
        return [[self._echo(r, i) for i in range(r.sampling.n)] for r in requests]

    @staticmethod
    def _echo(request: Request, index: int) -> Completion:
        users = [m.content for m in request.messages if m.role == "user"]
        text = (users[-1] if users else "") + (f" [{index}]" if index else "")
        finish = "stop"
        cuts = [text.find(s) for s in request.sampling.stop if s and s in text]
        if cuts:
            text = text[: min(cuts)]
        words = text.split(" ")
        if len(words) > request.sampling.max_tokens:
            text, finish = " ".join(words[: request.sampling.max_tokens]), "length"
        prompt_tokens = sum(len(m.content.split()) for m in request.messages)
        return Completion(text, finish, prompt_tokens, len(text.split()))


@dataclass(frozen=True)
class Faults:
    """The misbehaviour asked of the server: failures per distinct request body, then a delay."""

    fail_first: int = 0
    fail_statuses: tuple[int, ...] = (503,)  # failure k of a request gets status k, cycling
    delay_s: float = 0.0  # before each chat answer, to trigger client timeouts and interrupts


class FaultInjection:
    """ASGI middleware: chat requests fail ``fail_first`` times per distinct body, then wait
    ``delay_s`` before the app answers; every other request passes straight through."""

    def __init__(self, app, faults: Faults):
        self.app = app
        self.faults = faults
        self.failures: dict[str, int] = {}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != CHAT_PATH:
            await self.app(scope, receive, send)
            return
        messages, body = await _read_body(receive)
        key = hashlib.sha256(body).hexdigest()
        self.failures[key] = seen = self.failures.get(key, 0) + 1
        if seen <= self.faults.fail_first:
            status = self.faults.fail_statuses[(seen - 1) % len(self.faults.fail_statuses)]
            response = error_response(status, f"deliberate failure {seen}", {"Retry-After": "0"})
            await response(scope, receive, send)
            return
        if self.faults.delay_s:
            await asyncio.sleep(self.faults.delay_s)

        async def replay():
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


async def _read_body(receive) -> tuple[list[dict], bytes]:
    """The request's body messages (to replay to the app) and its bytes."""
    messages, more = [], True
    while more:
        message = await receive()
        messages.append(message)
        more = message.get("type") == "http.request" and message.get("more_body", False)
    return messages, b"".join(m.get("body", b"") for m in messages)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--fail-first", type=int, default=0, help="fail each distinct request N times")
    parser.add_argument("--fail-status", default="503", help="comma-separated failure statuses")
    parser.add_argument("--delay-s", type=float, default=0.0, help="sleep before each answer")
    args = parser.parse_args(argv)
    backend = EchoBackend() if args.model == "echo" else load_backend(args.model, args.cache_dir)
    faults = Faults(args.fail_first, tuple(int(s) for s in args.fail_status.split(",")), args.delay_s)
    serve(FaultInjection(create_app(backend, server_config(args)), faults), args.host, args.port)


if __name__ == "__main__":
    main()
