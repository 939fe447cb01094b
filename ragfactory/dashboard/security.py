"""Who may reach the dashboard: this machine by default, anyone else only with the token.

It binds to 127.0.0.1 unless told otherwise; any other address needs a token (``check_bind``),
and then every request must carry it: ``Authorization: Bearer <token>``, or the cookie a first
visit to ``/?token=<token>`` sets. Forms post only from the dashboard's own pages (the
``Origin`` of a POST must be its own host), so a page elsewhere cannot start a training through a
browser that has the dashboard open. The token is compared in constant time.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
COOKIE = "ragfactory_dashboard_token"
MIN_TOKEN_CHARS = 16


class BindRefused(ValueError):
    """A bind the dashboard will not make (a non-local address without a token)."""


def check_bind(host: str, token: str | None) -> None:
    """Raise ``BindRefused`` unless ``host`` is local or a token of at least 16 characters is set."""
    if host in LOCAL_HOSTS:
        return
    if not token:
        raise BindRefused(
            f"refusing to bind the dashboard to {host} without a token: anyone who reaches "
            f"it could read the warehouse and start trainings; set --token (or "
            f"RAGFACTORY_DASHBOARD_TOKEN), or bind 127.0.0.1"
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise BindRefused(
            f"the dashboard token must have at least {MIN_TOKEN_CHARS} characters "
            f"(e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`)"
        )


def _presented(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.cookies.get(COOKIE) or request.query_params.get("token")


class Guard(BaseHTTPMiddleware):
    """The token check (when a token is set) and the same-origin check on posts."""

    def __init__(self, app, token: str | None = None):
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next) -> Response:
        if self.token is not None:
            presented = _presented(request)
            if presented is None or not secrets.compare_digest(presented.encode(), self.token.encode()):
                return PlainTextResponse("a dashboard token is required: open /?token=<token>", status_code=401)
            if request.query_params.get("token") and request.method == "GET":
                response = RedirectResponse(request.url.remove_query_params("token"), status_code=303)
                response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
                return response
        if request.method == "POST":
            origin = request.headers.get("origin")
            if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
                return PlainTextResponse(f"cross-origin form post from {origin} refused", status_code=403)
        return await call_next(request)
