"""A ``Retriever`` backed by a Search-R1-style HTTP retrieval server (ours or Search-R1's own).

Queries go out in batches as ``{"queries", "topk", "return_scores": true}`` to ``/retrieve``;
each returned document's ``contents`` (``"Title"\\ntext``) is split back into title and text.
Connection errors, timeouts, 429 and 5xx answers are retried with exponential backoff, since a
shared server restarting or busy is the usual cause; other 4xx answers are the caller's bug and
fail at once. Every error names the URL.
"""

from __future__ import annotations

import math
import time
from typing import Any

import httpx

from ragfactory.tasks.retrieval.types import Hit, RetrievalError, check_k, parse_contents

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class HttpRetriever:
    """Search over HTTP; use as a context manager (or call ``close``) to release connections."""

    def __init__(
        self,
        url: str,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_batch: int = 256,
        client: httpx.Client | None = None,
    ):
        if max_retries < 0 or backoff_s < 0 or timeout_s <= 0 or max_batch < 1:
            raise ValueError("need timeout_s > 0, max_retries >= 0, backoff_s >= 0, max_batch >= 1")
        base = url.rstrip("/")
        self.url = base if base.endswith("/retrieve") else f"{base}/retrieve"
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_batch = max_batch  # large batches are split so one reply stays a modest size
        self.client = client or httpx.Client(timeout=timeout_s)
        self._owns_client = client is None  # a client passed in is closed by whoever made it

    def __enter__(self) -> HttpRetriever:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        k = check_k(k)
        out: list[list[Hit]] = []
        for start in range(0, len(queries), self.max_batch):
            batch = list(queries[start : start + self.max_batch])
            reply = self._post({"queries": batch, "topk": k, "return_scores": True})
            out.extend(self._parse(reply, len(batch)))
        return out

    def _post(self, payload: dict) -> Any:
        problem = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self.client.post(self.url, json=payload)
            except httpx.TransportError as exc:  # refused, reset, DNS, read/connect timeouts
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code in RETRY_STATUSES:
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.is_error:
                raise RetrievalError(f"{self.url}: HTTP {response.status_code}: {response.text[:500]}")
            try:
                return response.json()
            except ValueError as exc:
                raise RetrievalError(f"{self.url}: reply is not JSON: {exc}") from exc
        raise RetrievalError(f"{self.url}: no answer after {self.max_retries + 1} attempt(s); last error {problem}")

    def _parse(self, reply: Any, n_queries: int) -> list[list[Hit]]:
        rows = reply.get("result") if isinstance(reply, dict) else None
        if not isinstance(rows, list) or len(rows) != n_queries:
            got = f"{len(rows)} lists" if isinstance(rows, list) else type(rows).__name__
            raise RetrievalError(f"{self.url}: expected 'result' with {n_queries} lists, got {got}")
        try:
            return [[parse_item(item) for item in row] for row in rows]
        except (TypeError, KeyError, ValueError) as exc:
            raise RetrievalError(f"{self.url}: malformed hit in reply: {exc!r}") from exc


def parse_item(item: dict) -> Hit:
    """A hit from ``{"document": doc, "score": s}`` or a bare document (score unknown: NaN).

    A document carries ``contents``, or separate ``title`` and ``text`` as some servers send.
    """
    document = item["document"] if "document" in item else item
    score = float(item["score"]) if "score" in item else math.nan
    if "contents" in document:
        title, text = parse_contents(document["contents"])
    else:
        title, text = document.get("title", ""), document["text"]
    return Hit(str(document.get("id", "")), title, text, score)
